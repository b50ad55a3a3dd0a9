package objstore

import (
	"errors"
	"strings"
	"testing"
)

var badKeys = []string{
	"", "/", "/abs", "trailing/", "a//b", ".", "..", "../x", "a/../b", "a/./b", "a/..",
	".hidden", "a/.hidden", "a b", "a\\b", "a\x00b", "é", "a:b", "a?b", "a*b", "a%2e",
	strings.Repeat("k", MaxKeyLen+1),
}

func TestValidateKey(t *testing.T) {
	for _, k := range []string{"a", "agents/a-1/home.tar.zst", "A_b.c-d/e", strings.Repeat("k", MaxKeyLen), "a..b", "x/y..z"} {
		if err := ValidateKey(k); err != nil {
			t.Errorf("ValidateKey(%q) = %v, want nil", k, err)
		}
	}
	for _, k := range badKeys {
		err := ValidateKey(k)
		if !errors.Is(err, ErrInvalidKey) {
			t.Errorf("ValidateKey(%q) = %v, want ErrInvalidKey", k, err)
			continue
		}
		if len(k) < 20 && !strings.Contains(err.Error(), "invalid key:") {
			t.Errorf("ValidateKey(%q): unclear error %q", k, err)
		}
	}
	if err := ValidateKey("a/../b"); err == nil || !strings.Contains(err.Error(), `".." segment`) {
		t.Errorf("ValidateKey(a/../b) = %v: the error should name the '..' segment", err)
	}
	if err := ValidateKey(strings.Repeat("k", MaxKeyLen+1)); err == nil || !strings.Contains(err.Error(), "at most 512") {
		t.Errorf("long key: %v: the error should give the limit", err)
	}
}

func TestValidatePrefix(t *testing.T) {
	for _, p := range []string{"", "a", "a/", "a/b", "a/b/", "agents/a-1/home."} {
		if err := ValidatePrefix(p); err != nil {
			t.Errorf("ValidatePrefix(%q) = %v, want nil", p, err)
		}
	}
	for _, p := range []string{"/", "/a", "a//", "../", "a/../", "a/.", "a/.h", "a b", "./"} {
		if err := ValidatePrefix(p); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("ValidatePrefix(%q) = %v, want ErrInvalidKey", p, err)
		}
	}
}

func TestValidateMetadata(t *testing.T) {
	good := []map[string]string{nil, {}, {"image": "berth/headless:1.2", "sha-256": "ab12", "a": ""}}
	for _, m := range good {
		if err := ValidateMetadata(m); err != nil {
			t.Errorf("ValidateMetadata(%v) = %v", m, err)
		}
	}
	bad := []map[string]string{
		{"": "v"}, {"Upper": "v"}, {"1digit": "v"}, {"under_score": "v"}, {"a": "new\nline"},
		{"a": "é"}, {"a": " padded"}, {"a": strings.Repeat("v", MaxMetadataLen)},
		{strings.Repeat("n", 65): "v"},
	}
	for _, m := range bad {
		if err := ValidateMetadata(m); !errors.Is(err, ErrInvalidMetadata) {
			t.Errorf("ValidateMetadata(%q) = %v, want ErrInvalidMetadata", m, err)
		}
	}
	many := map[string]string{}
	for i := range 33 {
		many["k"+strings.Repeat("x", i)] = "v"
	}
	if err := ValidateMetadata(many); !errors.Is(err, ErrInvalidMetadata) {
		t.Errorf("33 entries: %v, want ErrInvalidMetadata", err)
	}
}
