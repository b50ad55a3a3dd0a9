// Package dbusprobe tells whether a D-Bus session bus answers, so that the
// companion sets its tray icon only where the tray can work. It never
// starts a bus (no dbus-launch autolaunch).
package dbusprobe

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/godbus/dbus/v5"
)

// Address returns the session bus address from $DBUS_SESSION_BUS_ADDRESS,
// or the per-user socket /run/user/UID/bus when it exists, or "".
func Address() string {
	if a := strings.TrimSpace(os.Getenv("DBUS_SESSION_BUS_ADDRESS")); a != "" {
		return a
	}
	p := "/run/user/" + strconv.Itoa(os.Getuid()) + "/bus"
	if fi, err := os.Stat(p); err == nil && fi.Mode()&os.ModeSocket != 0 {
		return "unix:path=" + p
	}
	return ""
}

// SessionBus reports nil when the session bus at Address answers a Hello
// within timeout, and otherwise why not.
func SessionBus(ctx context.Context, timeout time.Duration) error {
	addr := Address()
	if addr == "" {
		return errors.New("no D-Bus session bus: DBUS_SESSION_BUS_ADDRESS is unset")
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	done := make(chan error, 1)
	var conn *dbus.Conn
	go func() {
		c, err := dbus.Dial(addr, dbus.WithContext(ctx))
		if err == nil {
			conn = c
			if err = c.Auth(nil); err == nil {
				err = c.Hello()
			}
		}
		done <- err
	}()
	select {
	case err := <-done:
		if conn != nil {
			conn.Close()
		}
		if err != nil {
			return fmt.Errorf("D-Bus session bus at %s: %w", addr, err)
		}
		return nil
	case <-ctx.Done():
		go func() {
			<-done
			if conn != nil {
				conn.Close()
			}
		}()
		return fmt.Errorf("D-Bus session bus at %s: no answer within %s", addr, timeout)
	}
}
