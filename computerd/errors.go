package computerd

import "errors"

// ErrAnswerTooLarge is wrapped by the error of a call whose answer from
// computerd was larger than the client reads for that call (see the Client
// documentation for the limits). Nothing beyond the limit is read: the
// answer is dropped and the connection closed. For an exec, the command
// ran, but its result is lost; a computerd that follows the protocol never
// sends such an answer.
var ErrAnswerTooLarge = errors.New("computerd: answer too large")

// ErrArchiveIncomplete is wrapped by the error of an Archive whose stream
// cannot be trusted whole: it ended without computerd's trailer, or with a
// byte count or SHA-256 other than computerd's.
var ErrArchiveIncomplete = errors.New("computerd: archive incomplete")
