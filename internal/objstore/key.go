package objstore

import (
	"fmt"
	"strings"
)

// MaxKeyLen bounds a key's length in bytes. S3 allows 1024; the rest is
// left for a store's prefix.
const MaxKeyLen = 512

// Metadata bounds: S3 allows 2 KiB of user metadata in all.
const (
	MaxMetadataLen  = 1536 // names and values together, in bytes
	maxMetaNameLen  = 64
	maxMetaEntries  = 32
	metaNameCharset = "lowercase letters, digits and '-'"
)

// ValidateKey checks a key: 1 to MaxKeyLen bytes of letters, digits, '.',
// '_', '-' and '/', where '/' separates non-empty segments that neither
// start with '.' (so no "." or ".." segment, nor one that could clash with
// a store's own hidden files). Errors wrap ErrInvalidKey.
func ValidateKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: empty", ErrInvalidKey)
	}
	if err := checkKeyChars(key); err != nil {
		return err
	}
	for seg := range strings.SplitSeq(key, "/") {
		if err := checkSegment(key, seg); err != nil {
			return err
		}
	}
	return nil
}

// ValidatePrefix checks a List prefix: "" (everything), or a string that is
// a valid key, or a valid key followed by '/', or the start of a segment
// that may be extended to a valid key. Errors wrap ErrInvalidKey.
func ValidatePrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	if err := checkKeyChars(prefix); err != nil {
		return err
	}
	segs := strings.Split(strings.TrimSuffix(prefix, "/"), "/")
	for i, seg := range segs {
		if i == len(segs)-1 && !strings.HasSuffix(prefix, "/") && seg != "" && seg[0] != '.' {
			continue // a partial last segment: "arch" lists "archive-1"
		}
		if err := checkSegment(prefix, seg); err != nil {
			return err
		}
	}
	return nil
}

func checkKeyChars(key string) error {
	if len(key) > MaxKeyLen {
		return fmt.Errorf("%w: %d bytes long, at most %d allowed", ErrInvalidKey, len(key), MaxKeyLen)
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; !keyChar(c) {
			return fmt.Errorf("%w: %q has the character %q at byte %d; only letters, digits, '.', '_', '-' and '/' are allowed", ErrInvalidKey, key, rune(c), i)
		}
	}
	return nil
}

func keyChar(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '.' || c == '_' || c == '-' || c == '/'
}

func checkSegment(key, seg string) error {
	switch {
	case seg == "":
		return fmt.Errorf("%w: %q has an empty path segment (a leading, trailing or doubled '/')", ErrInvalidKey, key)
	case seg == "." || seg == "..":
		return fmt.Errorf("%w: %q has a %q segment", ErrInvalidKey, key, seg)
	case seg[0] == '.':
		return fmt.Errorf("%w: %q has a segment starting with '.' (%q)", ErrInvalidKey, key, seg)
	}
	return nil
}

// ValidateMetadata checks metadata: at most 32 entries whose names are 1 to
// 64 of lowercase letters, digits and '-' (starting with a letter), whose
// values are printable ASCII without leading or trailing spaces, and which
// together take at most MaxMetadataLen bytes. Errors wrap ErrInvalidMetadata.
func ValidateMetadata(meta map[string]string) error {
	if len(meta) > maxMetaEntries {
		return fmt.Errorf("%w: %d entries, at most %d allowed", ErrInvalidMetadata, len(meta), maxMetaEntries)
	}
	total := 0
	for name, v := range meta {
		total += len(name) + len(v)
		if name == "" || len(name) > maxMetaNameLen || name[0] < 'a' || name[0] > 'z' {
			return fmt.Errorf("%w: name %q must be 1 to %d of %s, starting with a letter", ErrInvalidMetadata, name, maxMetaNameLen, metaNameCharset)
		}
		for i := 0; i < len(name); i++ {
			if c := name[i]; !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
				return fmt.Errorf("%w: name %q: only %s are allowed", ErrInvalidMetadata, name, metaNameCharset)
			}
		}
		for i := 0; i < len(v); i++ {
			if c := v[i]; c < 0x20 || c > 0x7e {
				return fmt.Errorf("%w: value of %q: byte %d is not printable ASCII", ErrInvalidMetadata, name, i)
			}
		}
		if strings.TrimSpace(v) != v {
			return fmt.Errorf("%w: value of %q has leading or trailing spaces", ErrInvalidMetadata, name)
		}
	}
	if total > MaxMetadataLen {
		return fmt.Errorf("%w: %d bytes in all, at most %d allowed", ErrInvalidMetadata, total, MaxMetadataLen)
	}
	return nil
}

// cloneMeta copies meta; nil stays nil.
func cloneMeta(meta map[string]string) map[string]string {
	if meta == nil {
		return nil
	}
	out := make(map[string]string, len(meta))
	for k, v := range meta {
		out[k] = v
	}
	return out
}
