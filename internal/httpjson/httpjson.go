// Package httpjson is JSON over HTTP as every Berth server and client speaks
// it: answers written as JSON, request bodies read strictly through a size
// limit, and the one error envelope,
//
//	{"error": {"code": "...", "message": "..."}}
//
// read back by clients through a limit. The error codes belong to each
// protocol (computerd, lending, the REST API); this package only carries
// them.
package httpjson

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// Error is the error inside the envelope. Status is the HTTP status it is
// answered with; it is not part of the body.
type Error struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// ErrorBody is the envelope of every error answer.
type ErrorBody struct {
	Error *Error `json:"error"`
}

// Write answers v as JSON with the given status. A 204 answer has no body.
// Characters special in HTML (<, > and &) are written as they are, so that
// an answer printed raw reads as it was meant. The types written always
// encode; a failed write means the client went away, so it is not reported.
func Write(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if status == http.StatusNoContent {
		return
	}
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.Encode(v)
}

// WriteError answers the envelope with the given status, code and message.
func WriteError(w http.ResponseWriter, status int, code, message string) {
	Write(w, status, ErrorBody{Error: &Error{Status: status, Code: code, Message: message}})
}

// DecodeError is a request body that Decode refused. Its message names the
// field or the limit; the caller answers it with its protocol's code.
type DecodeError struct {
	// TooLarge is set when the body is over the limit (answered 413);
	// any other refusal is a malformed body (answered 400).
	TooLarge bool
	// Empty is set when there was no body at all.
	Empty   bool
	Message string
}

func (e *DecodeError) Error() string { return e.Message }

// Status is the HTTP status the refusal is answered with.
func (e *DecodeError) Status() int {
	if e.TooLarge {
		return http.StatusRequestEntityTooLarge
	}
	return http.StatusBadRequest
}

// Decode reads the request body, at most limit bytes, as one JSON value into
// v. Unknown fields, a value of the wrong type, trailing data, an empty body
// and an oversize body are refused with a *DecodeError that says why.
func Decode(w http.ResponseWriter, r *http.Request, limit int64, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, limit))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		var ute *json.UnmarshalTypeError
		switch {
		case errors.As(err, &mbe):
			return &DecodeError{TooLarge: true, Message: fmt.Sprintf("body: larger than %d bytes", limit)}
		case errors.Is(err, io.EOF):
			return &DecodeError{Empty: true, Message: "body: a JSON object is required"}
		case errors.As(err, &ute):
			return &DecodeError{Message: fmt.Sprintf("%s: must be a JSON %s", ute.Field, ute.Type)}
		default:
			return &DecodeError{Message: "body: " + err.Error()}
		}
	}
	if dec.More() {
		return &DecodeError{Message: "body: trailing data after the JSON object"}
	}
	return nil
}

// DecodeOptional is Decode for a request whose body may be left out: an
// empty body leaves v as it is.
func DecodeOptional(w http.ResponseWriter, r *http.Request, limit int64, v any) error {
	if r.ContentLength == 0 {
		return nil
	}
	err := Decode(w, r, limit, v)
	var de *DecodeError
	if errors.As(err, &de) && de.Empty {
		return nil
	}
	return err
}

// ReadError reads the error answer resp, at most limit bytes of its body.
// When the body is the envelope with a code, the error carries that code
// and message; otherwise its Code is empty and its Message is the trimmed
// text of the body (cut at limit). Status is resp's. err is set only when
// the body could not be read; e then holds what was read.
func ReadError(resp *http.Response, limit int64) (e *Error, err error) {
	b, err := io.ReadAll(io.LimitReader(resp.Body, limit))
	e = &Error{Status: resp.StatusCode}
	var body ErrorBody
	if json.Unmarshal(b, &body) == nil && body.Error != nil && body.Error.Code != "" {
		e.Code, e.Message = body.Error.Code, body.Error.Message
		return e, err
	}
	e.Message = strings.TrimSpace(string(b))
	return e, err
}
