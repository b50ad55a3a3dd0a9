package turnserver

import (
	"crypto/hmac"
	"crypto/sha1"
	"encoding/base64"
	"strconv"
	"strings"
	"time"
)

// MaxTTL is the longest a TURN credential lives.
const MaxTTL = 10 * time.Minute

// Credentials are ephemeral TURN REST credentials (draft-uberti-behave-turn-rest):
// the username is "expiry:id" with expiry in Unix seconds, the password is
// base64(HMAC-SHA1(secret, username)).
type Credentials struct {
	Username string    `json:"username"`
	Password string    `json:"credential"`
	Expires  time.Time `json:"expires"`
}

// Issue makes credentials for id that expire ttl after now. ttl must be at
// most MaxTTL.
func Issue(secret []byte, id string, now time.Time, ttl time.Duration) (Credentials, error) {
	if len(secret) < 16 {
		return Credentials{}, ErrBadSecret
	}
	if ttl < time.Second || ttl > MaxTTL {
		return Credentials{}, ErrBadTTL
	}
	if id == "" || len(id) > 128 || strings.ContainsRune(id, ':') {
		return Credentials{}, ErrBadID
	}
	exp := now.Add(ttl).Truncate(time.Second)
	user := strconv.FormatInt(exp.Unix(), 10) + ":" + id
	return Credentials{Username: user, Password: password(secret, user), Expires: exp.UTC()}, nil
}

func password(secret []byte, user string) string {
	mac := hmac.New(sha1.New, secret)
	mac.Write([]byte(user))
	return base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// RefreshGrace is how long after its expiry a credential still refreshes
// an allocation (and its permissions and channels) made while it was
// valid: a viewer watches for as long as a session lasts, but no new
// allocation is ever made with an expired credential.
const RefreshGrace = 30 * time.Minute

// parseUser splits "expiry:id" and reports whether the username is valid at
// now: not expired (or, with grace, expired less than grace ago), and not
// expiring further ahead than MaxTTL plus a minute of clock skew.
func parseUser(user string, now time.Time, grace time.Duration) (id string, ok bool) {
	ts, id, found := strings.Cut(user, ":")
	if !found || id == "" {
		return "", false
	}
	exp, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return "", false
	}
	t := time.Unix(exp, 0)
	if !now.Before(t.Add(grace)) || t.Sub(now) > MaxTTL+time.Minute {
		return "", false
	}
	return id, true
}
