package e2bfake

// The rules the fake holds every request to, so that a client the fake
// accepts is one E2B's API accepts.
//
// The document is E2B's OpenAPI file, spec/openapi.yml of
// github.com/e2b-dev/E2B at commit b8029973aa7d (2026-08-21, info.version
// 0.1.0). spec/openapi.yml of github.com/e2b-dev/infra at commit
// 54693ff353d2 (2026-08-22) defines the same schemas for the calls below,
// and that repository's API server checks every request against it before
// a handler runs: packages/api/main.go puts an OpenAPI request validator in
// front of all routes, and packages/api/internal/utils/error.go answers its
// failures 400 (404 for no such route) with {"code", "message"}. The
// schemas below are those of the document, written out in Go; none of them
// closes its properties (no "additionalProperties: false"), so a property
// the document does not name is ignored, as that validator ignores it.
//
// The rules the document does not show are the API server's handlers at
// the same infra commit (packages/api/internal/handlers), each cited where
// the fake plays it.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// schema is one schema of the document: the parts of OpenAPI 3.0 its
// schemas for these calls use.
type schema struct {
	typ      string // "object", "array", "string", "integer" or "boolean"
	int32    bool   // format: int32
	min, max *int64 // minimum, maximum
	maxLen   int    // maxLength (0: none)
	enum     []string
	nullable bool
	required []string
	props    map[string]*schema
	values   *schema // additionalProperties: the schema of a map's values
	items    *schema // the schema of an array's items
}

func bound(n int64) *int64 { return &n }

var (
	str        = &schema{typ: "string"}
	boolean    = &schema{typ: "boolean"}
	stringList = &schema{typ: "array", items: str}
	// SandboxMetadata and EnvVars: objects whose additionalProperties are
	// strings.
	stringMap = &schema{typ: "object", values: str}
)

// sandboxNetworkConfig is SandboxNetworkConfig, with SandboxEgressProxyConfig
// (nullable; address required; username and password at most 255
// characters) and SandboxNetworkRule/SandboxNetworkTransform under rules.
var sandboxNetworkConfig = &schema{typ: "object", props: map[string]*schema{
	"allowPublicTraffic": boolean,
	"allowOut":           stringList,
	"denyOut":            stringList,
	"egressProxy": {typ: "object", nullable: true, required: []string{"address"}, props: map[string]*schema{
		"address":  str,
		"username": {typ: "string", maxLen: 255},
		"password": {typ: "string", maxLen: 255},
	}},
	"maskRequestHost": str,
	"rules": {typ: "object", values: &schema{typ: "array", items: &schema{typ: "object", props: map[string]*schema{
		"transform": {typ: "object", props: map[string]*schema{"headers": stringMap}},
	}}}},
}}

// newSandbox is NewSandbox, the body of POST /sandboxes: templateID
// required; timeout an int32 of at least 0 (default 15); autoPause,
// autoPauseMemory, secure and allow_internet_access booleans; autoResume
// SandboxAutoResumeConfig ({enabled} required); network
// SandboxNetworkConfig; metadata SandboxMetadata; envVars EnvVars; mcp Mcp
// (a nullable object); iam SandboxIam (tokens: a map of SandboxIamToken,
// audience and tokenType required); volumeMounts an array of
// SandboxVolumeMount (name and path required).
var newSandbox = &schema{typ: "object", required: []string{"templateID"}, props: map[string]*schema{
	"templateID":            str,
	"timeout":               {typ: "integer", int32: true, min: bound(0)},
	"autoPause":             boolean,
	"autoPauseMemory":       boolean,
	"autoResume":            {typ: "object", required: []string{"enabled"}, props: map[string]*schema{"enabled": boolean}},
	"secure":                boolean,
	"allow_internet_access": boolean,
	"network":               sandboxNetworkConfig,
	"metadata":              stringMap,
	"envVars":               stringMap,
	"mcp":                   {typ: "object", nullable: true},
	"iam": {typ: "object", props: map[string]*schema{
		"tokens": {typ: "object", values: &schema{typ: "object", required: []string{"audience", "tokenType"},
			props: map[string]*schema{"audience": str, "tokenType": str}}},
	}},
	"volumeMounts": {typ: "array", items: &schema{typ: "object", required: []string{"name", "path"},
		props: map[string]*schema{"name": str, "path": str}}},
}}

// connectSandbox is ConnectSandbox, the body of POST
// /sandboxes/{sandboxID}/connect: timeout required, an int32 of at least 0.
var connectSandbox = &schema{typ: "object", required: []string{"timeout"}, props: map[string]*schema{
	"timeout": {typ: "integer", int32: true, min: bound(0)},
}}

// check reports the first place where v, decoded with json.Decoder's
// UseNumber, breaks s; at names the place ("" is the body itself).
func (s *schema) check(v any, at string) error {
	if v == nil {
		if s.nullable {
			return nil
		}
		return fieldError(at, "value is not nullable")
	}
	switch s.typ {
	case "object":
		m, ok := v.(map[string]any)
		if !ok {
			return fieldError(at, "value must be an object")
		}
		for _, r := range s.required {
			if _, ok := m[r]; !ok {
				return fieldError(at+"/"+r, "property is required")
			}
		}
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			sub := s.props[k]
			if sub == nil {
				sub = s.values
			}
			if sub == nil {
				continue // a property the document does not name: ignored
			}
			if err := sub.check(m[k], at+"/"+k); err != nil {
				return err
			}
		}
	case "array":
		a, ok := v.([]any)
		if !ok {
			return fieldError(at, "value must be an array")
		}
		for i, x := range a {
			if err := s.items.check(x, at+"/"+strconv.Itoa(i)); err != nil {
				return err
			}
		}
	case "string":
		t, ok := v.(string)
		if !ok {
			return fieldError(at, "value must be a string")
		}
		if s.maxLen > 0 && utf8.RuneCountInString(t) > s.maxLen {
			return fieldError(at, fmt.Sprintf("at most %d characters", s.maxLen))
		}
		if len(s.enum) > 0 && !slices.Contains(s.enum, t) {
			return fieldError(at, fmt.Sprintf("value %q is not one of %s", t, strings.Join(s.enum, ", ")))
		}
	case "integer":
		n, ok := v.(json.Number)
		if !ok {
			return fieldError(at, "value must be an integer")
		}
		return s.checkInt(string(n), at)
	case "boolean":
		if _, ok := v.(bool); !ok {
			return fieldError(at, "value must be a boolean")
		}
	}
	return nil
}

// checkInt checks the integer written as raw (in a body or a query).
func (s *schema) checkInt(raw, at string) error {
	f, err := strconv.ParseFloat(raw, 64)
	if err != nil || f != math.Trunc(f) || math.IsInf(f, 0) {
		return fieldError(at, "value must be an integer")
	}
	if s.int32 && (f < math.MinInt32 || f > math.MaxInt32) {
		return fieldError(at, "number must be an int32")
	}
	if s.min != nil && f < float64(*s.min) {
		return fieldError(at, fmt.Sprintf("number must be at least %d", *s.min))
	}
	if s.max != nil && f > float64(*s.max) {
		return fieldError(at, fmt.Sprintf("number must be at most %d", *s.max))
	}
	return nil
}

func fieldError(at, what string) error {
	if at == "" {
		at = "/"
	}
	return fmt.Errorf("%s: %s", at, what)
}

// validationError is the message of a request the document refuses.
func validationError(part string, err error) string {
	return "validation error: " + part + ": " + err.Error()
}

// decodeBody reads r's JSON body, which the operation requires, and checks
// it against s; the error is the message of the 400 answer. A body is
// application/json, the only media type the document gives these calls.
func decodeBody(r *http.Request, s *schema) ([]byte, string) {
	raw, err := io.ReadAll(io.LimitReader(r.Body, 16<<20))
	if err != nil {
		return nil, "validation error: request body: " + err.Error()
	}
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, "validation error: request body: value is required but missing"
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		return nil, fmt.Sprintf("validation error: header Content-Type has unexpected value %q", r.Header.Get("Content-Type"))
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, validationError("request body", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, "validation error: request body: data after the JSON value"
	}
	if err := s.check(v, ""); err != nil {
		return nil, validationError("request body", err)
	}
	return raw, ""
}

// listQuery checks the query of GET /v2/sandboxes against the operation's
// parameters: state, an array of SandboxState (running, paused) written
// form-style without explode (comma-separated); order, OrderDirection
// (asc, desc); startedAfter, a date-time; limit, paginationLimit (an int32
// from 1 to 100); metadata, template and nextToken, strings.
func listQuery(q url.Values) string {
	if st := q.Get("state"); q.Has("state") {
		for _, s := range strings.Split(st, ",") {
			if err := sandboxState.check(s, "state"); err != nil {
				return validationError("query parameter", err)
			}
		}
	}
	if o := q.Get("order"); q.Has("order") {
		if err := orderDirection.check(o, "order"); err != nil {
			return validationError("query parameter", err)
		}
	}
	if t := q.Get("startedAfter"); q.Has("startedAfter") {
		if _, err := time.Parse(time.RFC3339, t); err != nil {
			return validationError("query parameter", fieldError("startedAfter", "value must be a date-time"))
		}
	}
	if l := q.Get("limit"); q.Has("limit") {
		if err := paginationLimit.checkInt(l, "limit"); err != nil {
			return validationError("query parameter", err)
		}
	}
	return ""
}

var (
	sandboxState    = &schema{typ: "string", enum: []string{"running", "paused"}}
	orderDirection  = &schema{typ: "string", enum: []string{"asc", "desc"}}
	paginationLimit = &schema{typ: "integer", int32: true, min: bound(1), max: bound(100)}
)

// Template references, as the API server parses them before it looks a
// template up (packages/shared/pkg/id/id.go, ParseName, called by
// handlers/sandbox_create.go; a reference it refuses is answered 400):
// "[namespace/]alias[:tag]", trimmed and lower-cased, the namespace and
// alias of lower-case letters, digits, '-' and '_', the tag of those and
// '.'; the tag "default" is no tag.
var (
	referenceName = regexp.MustCompile(`^[a-z0-9-_]+$`)
	referenceTag  = regexp.MustCompile(`^[a-z0-9-_.]+$`)
)

// parseReference returns the template and tag ("" for none) that ref
// names, or why it names none.
func parseReference(ref string) (name, tag string, err error) {
	ref = strings.ToLower(strings.TrimSpace(ref))
	name, tag, hasTag := strings.Cut(ref, ":")
	if hasTag && !referenceTag.MatchString(tag) {
		return "", "", fmt.Errorf("the tag %q is not valid", tag)
	}
	if tag == "default" {
		tag = ""
	}
	ns, alias, hasNS := strings.Cut(name, "/")
	if !hasNS {
		ns, alias = "", name
	}
	if hasNS && !referenceName.MatchString(ns) {
		return "", "", fmt.Errorf("the namespace %q is not valid", ns)
	}
	if !referenceName.MatchString(alias) {
		return "", "", fmt.Errorf("the template id %q is not valid", alias)
	}
	return name, tag, nil
}

// Sandbox ids in paths, as the API server reads them before it looks a
// sandbox up (packages/api/internal/utils/split.go, ShortID, and
// packages/shared/pkg/id/id.go, ValidateSandboxID; refused with 400): at
// most one '-' (what follows it, a client id, is dropped), and the id of
// lower-case letters and digits.
var sandboxIDChars = regexp.MustCompile(`^[a-z0-9]+$`)

func shortID(raw string) (string, bool) {
	parts := strings.Split(raw, "-")
	if len(parts) > 2 || !sandboxIDChars.MatchString(parts[0]) {
		return "", false
	}
	return parts[0], true
}
