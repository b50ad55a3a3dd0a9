package turnserver

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/pion/logging"
)

// pionLogs sends pion's logs to slog: its errors and warnings at debug
// level (a client's bad request is not the server's failure), the rest
// dropped.
type pionLogs struct{ log *slog.Logger }

func (f pionLogs) NewLogger(scope string) logging.LeveledLogger {
	return pionLogger{f.log.With("scope", scope)}
}

type pionLogger struct{ log *slog.Logger }

func (l pionLogger) emit(msg string) {
	if l.log.Enabled(context.Background(), slog.LevelDebug) {
		l.log.Debug(msg)
	}
}

func (l pionLogger) Trace(string)                 {}
func (l pionLogger) Tracef(string, ...any)        {}
func (l pionLogger) Debug(string)                 {}
func (l pionLogger) Debugf(string, ...any)        {}
func (l pionLogger) Info(string)                  {}
func (l pionLogger) Infof(string, ...any)         {}
func (l pionLogger) Warn(msg string)              { l.emit(msg) }
func (l pionLogger) Warnf(f string, args ...any)  { l.emit(fmt.Sprintf(f, args...)) }
func (l pionLogger) Error(msg string)             { l.emit(msg) }
func (l pionLogger) Errorf(f string, args ...any) { l.emit(fmt.Sprintf(f, args...)) }
