// Package units writes quantities for people.
package units

import "fmt"

// Bytes writes n bytes in powers of 1000 with one decimal: 812 bytes,
// 1.5 MB, 20.0 GB.
func Bytes(n int64) string {
	if n < 1000 {
		return fmt.Sprintf("%d bytes", n)
	}
	v, exp := float64(n)/1000, 0
	for v >= 999.95 && exp < 5 {
		v /= 1000
		exp++
	}
	return fmt.Sprintf("%.1f %cB", v, "kMGTPE"[exp])
}
