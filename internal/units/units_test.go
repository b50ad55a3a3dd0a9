package units

import "testing"

func TestBytes(t *testing.T) {
	for n, want := range map[int64]string{
		0: "0 bytes", 999: "999 bytes", 1000: "1.0 kB", 1536000: "1.5 MB", 999_999_999: "1.0 GB", 999_940_000: "999.9 MB",
		2_500_000_000: "2.5 GB", 7 << 40: "7.7 TB", 1 << 62: "4.6 EB",
	} {
		if got := Bytes(n); got != want {
			t.Errorf("Bytes(%d) = %q, want %q", n, got, want)
		}
	}
}
