package egress

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strings"
)

// mailPorts are the outbound mail ports refused when abuse checks are on:
// SMTP, SMTPS, submission and the common alternative submission port.
var mailPorts = map[uint16]bool{25: true, 465: true, 587: true, 2525: true}

// miningPorts are the ports that stratum mining pools commonly listen on,
// refused when abuse checks are on: 3333, 3334, 4444, 5555, 6666, 7777,
// 8888, 9999, 14433, 14444, 45560 and 45700.
var miningPorts = map[uint16]bool{
	3333: true, 3334: true, 4444: true, 5555: true, 6666: true, 7777: true,
	8888: true, 9999: true, 14433: true, 14444: true, 45560: true, 45700: true,
}

// portVerdict is the verdict on a destination port when abuse checks are on:
// VerdictAllowed, VerdictAbuseMail or VerdictAbuseMining.
func portVerdict(port uint16) Verdict {
	switch {
	case mailPorts[port]:
		return VerdictAbuseMail
	case miningPorts[port]:
		return VerdictAbuseMining
	}
	return VerdictAllowed
}

// sniffLimit is how many of a tunnel's first client bytes are looked at for
// a stratum handshake.
const sniffLimit = 4096

// stratumSniffer looks at the first bytes a client sends into a tunnel for
// a stratum login: a JSON-RPC message whose method is mining.subscribe,
// mining.authorize (or any other mining.*), eth_submitLogin, or login with
// an "agent" parameter (xmrig and its kin). Stratum is line-delimited
// JSON, so anything that does not start with '{' is not stratum.
type stratumSniffer struct {
	buf  []byte
	done bool
}

var (
	methodRE = regexp.MustCompile(`"method"\s*:\s*"([^"\\]*)"`)
	agentRE  = regexp.MustCompile(`"agent"\s*:`)
)

// feed adds the next bytes from the client and reports whether they are a
// stratum handshake. After it has decided, or after sniffLimit bytes, it
// reports false and stops looking.
func (s *stratumSniffer) feed(p []byte) bool {
	if s.done {
		return false
	}
	s.buf = append(s.buf, p[:min(len(p), sniffLimit-len(s.buf))]...)
	rest := bytes.TrimLeft(s.buf, " \t\r\n")
	if len(rest) == 0 {
		return false
	}
	if rest[0] != '{' {
		s.done = true
		return false
	}
	// A complete first message decides.
	line, _, complete := bytes.Cut(rest, []byte("\n"))
	if complete || json.Valid(rest) {
		s.done = true
		return stratumMessage(line)
	}
	if len(s.buf) >= sniffLimit {
		s.done = true
	}
	// Part of a message: decide on what is there, so that nothing of a
	// handshake is forwarded while waiting for the rest.
	return stratumText(rest)
}

// stratumMessage reports whether msg, one JSON-RPC message, is a stratum
// login. A message that is not valid JSON is judged by its text.
func stratumMessage(msg []byte) bool {
	var m struct {
		Method string          `json:"method"`
		Params json.RawMessage `json:"params"`
	}
	if err := json.Unmarshal(msg, &m); err != nil {
		return stratumText(msg)
	}
	if stratumMethod(m.Method) {
		return true
	}
	if m.Method != "login" {
		return false
	}
	var params map[string]json.RawMessage
	if json.Unmarshal(m.Params, &params) != nil {
		return false
	}
	_, agent := params["agent"]
	return agent
}

// stratumText judges a message that may be incomplete by its text.
func stratumText(b []byte) bool {
	m := methodRE.FindSubmatch(b)
	if m == nil {
		return false
	}
	method := string(m[1])
	return stratumMethod(method) || method == "login" && agentRE.Match(b)
}

func stratumMethod(m string) bool {
	return strings.HasPrefix(m, "mining.") || m == "eth_submitLogin"
}
