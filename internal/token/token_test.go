package token

import (
	"strings"
	"testing"
)

func TestDeriveAndCheck(t *testing.T) {
	d, err := NewDeriver([]byte(strings.Repeat("s", 32)))
	if err != nil {
		t.Fatal(err)
	}
	a := d.Derive(Computer, "c1")
	if a != d.Derive(Computer, "c1") {
		t.Fatal("derive is not deterministic")
	}
	if a == d.Derive(Computer, "c2") || a == d.Derive(Egress, "c1") {
		t.Fatal("tokens for other ids or purposes must differ")
	}
	h := Hash(a)
	if !Check(a, h) {
		t.Fatal("own token rejected")
	}
	if Check(d.Derive(Computer, "c2"), h) || Check("", h) || Check(h, h) {
		t.Fatal("foreign token accepted")
	}
	other, _ := NewDeriver([]byte(strings.Repeat("t", 32)))
	if Check(other.Derive(Computer, "c1"), h) {
		t.Fatal("token from another secret accepted")
	}
}

func TestShortSecret(t *testing.T) {
	if _, err := NewDeriver([]byte("short")); err != ErrShortSecret {
		t.Fatalf("err = %v, want ErrShortSecret", err)
	}
}
