package browser

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/chromedp/cdproto"
	"github.com/chromedp/chromedp"

	"github.com/berthdev/berth/internal/httpjson"
)

func errorf(status int, code, format string, args ...any) *httpjson.Error {
	return &httpjson.Error{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

func badRequest(format string, args ...any) *httpjson.Error {
	return errorf(http.StatusBadRequest, CodeBadRequest, format, args...)
}

func tooLarge(format string, args ...any) *httpjson.Error {
	return errorf(http.StatusRequestEntityTooLarge, CodeBadRequest, format, args...)
}

func refNotFound(ref string, why string) *httpjson.Error {
	return errorf(http.StatusNotFound, CodeRefNotFound, "ref %s: %s; take a new snapshot for current references", ref, why)
}

func notInteractable(format string, args ...any) *httpjson.Error {
	return errorf(http.StatusConflict, CodeNotInteractable, format, args...)
}

func timedOut(format string, args ...any) *httpjson.Error {
	return errorf(http.StatusGatewayTimeout, CodeTimeout, format, args...)
}

func browserFailed(format string, args ...any) *httpjson.Error {
	return errorf(http.StatusBadGateway, CodeBrowserFailed, format, args...)
}

// IsBrowserFailed reports whether err is a CodeBrowserFailed answer.
func IsBrowserFailed(err error) bool {
	var he *httpjson.Error
	return errors.As(err, &he) && he.Code == CodeBrowserFailed
}

// describe turns a failure of a DevTools call into the protocol's error.
// ctx is the call's context (with its deadline), what names the step, and
// limit is the call's timeout for the message.
func describe(ctx context.Context, lost <-chan struct{}, err error, what string, limit time.Duration) error {
	if err == nil {
		return nil
	}
	var he *httpjson.Error
	if errors.As(err, &he) {
		return he
	}
	select {
	case <-lost:
		return browserFailed("%s: the browser exited or closed the connection", what)
	default:
	}
	if errors.Is(err, chromedp.ErrTargetDetached) {
		return browserFailed("%s: the tab closed or crashed during the call", what)
	}
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded) || errors.Is(err, context.DeadlineExceeded):
		return timedOut("%s: not done within %s", what, limit)
	case ctx.Err() != nil:
		return browserFailed("%s: the call was canceled", what)
	}
	var ce *cdproto.Error
	if errors.As(err, &ce) {
		return browserFailed("%s: %s", what, ce.Message)
	}
	return browserFailed("%s: %v", what, err)
}

// isNoNode reports whether err is the browser saying that a node id names
// no node.
func isNoNode(err error) bool {
	var ce *cdproto.Error
	if !errors.As(err, &ce) {
		return false
	}
	m := strings.ToLower(ce.Message)
	return strings.Contains(m, "no node") || strings.Contains(m, "could not find node") || strings.Contains(m, "node with given id")
}
