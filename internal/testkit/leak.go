package testkit

import "go.uber.org/goleak"

// processGoroutines are goroutines that libraries start when their
// packages load and keep for the life of the process: never a leak of the
// code under test.
var processGoroutines = []goleak.Option{
	// fyne's driver starts its event queue in an init function.
	goleak.IgnoreAnyFunction("fyne.io/fyne/v2/internal/async.(*UnboundedChan[...]).processing"),
}

// LeakOptions returns the goleak options every package uses, followed by
// extra (a package's own, narrowly scoped ignores, each with a comment
// saying why).
func LeakOptions(extra ...goleak.Option) []goleak.Option {
	return append(append([]goleak.Option{}, processGoroutines...), extra...)
}

// VerifyTestMain runs the tests of m and exits, failing the run when
// goroutines are left over once they have ended. Call it from TestMain;
// m may be wrapped, as in testkit.VerifyTestMain(pgtest.Wrap(m)).
func VerifyTestMain(m goleak.TestingM, extra ...goleak.Option) {
	goleak.VerifyTestMain(m, LeakOptions(extra...)...)
}

// VerifyNone fails t when goroutines other than the usual ones are running.
func VerifyNone(t goleak.TestingT, extra ...goleak.Option) {
	goleak.VerifyNone(t, LeakOptions(extra...)...)
}
