package desktop

import (
	"bytes"
	"errors"
	"io"
	"os/exec"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/testkit"
)

// encode runs ffmpeg on a synthetic source (30 frames at 15 fps) with the
// streamer's encoder settings and returns its output.
func encode(t *testing.T, codec string) []byte {
	t.Helper()
	testkit.RequireTools(t, "apt-get install -y ffmpeg", "ffmpeg")
	d := New(Config{Width: 320, Height: 240})
	args := d.ffmpegArgs(codec)
	// Replace the X input with a test pattern of the same size and rate.
	for i := 0; i < len(args)-1; i++ {
		if args[i] == "-f" && args[i+1] == "x11grab" {
			args = append(append(append([]string{}, args[:i]...), "-f", "lavfi", "-i", "testsrc=size=320x240:rate=15", "-frames:v", "30"), args[i+10:]...)
			break
		}
	}
	out, err := exec.Command("ffmpeg", args...).Output()
	if err != nil {
		t.Fatalf("ffmpeg %v: %v", args, err)
	}
	return out
}

func readAll(t *testing.T, fr frameReader) []frame {
	t.Helper()
	var fs []frame
	for {
		f, err := fr.next()
		if errors.Is(err, io.EOF) {
			return fs
		}
		if err != nil {
			t.Fatal(err)
		}
		fs = append(fs, f)
	}
}

func TestFLVToAnnexB(t *testing.T) {
	fs := readAll(t, newFLVReader(bytes.NewReader(encode(t, CodecH264))))
	if len(fs) != 30 {
		t.Fatalf("%d frames, want 30", len(fs))
	}
	keys := 0
	for i, f := range fs {
		if !bytes.HasPrefix(f.data, annexB) {
			t.Fatalf("frame %d does not start with a start code", i)
		}
		nal := f.data[4] & 0x1f
		if f.key {
			keys++
			if nal != 7 { // SPS first, then PPS, then the IDR slice
				t.Errorf("keyframe %d starts with NAL type %d, want SPS (7)", i, nal)
			}
			if !bytes.Contains(f.data, []byte{0, 0, 0, 1, 0x68}) && !bytes.Contains(f.data, []byte{0, 0, 0, 1, 0x28}) {
				t.Errorf("keyframe %d has no PPS", i)
			}
		}
	}
	if !fs[0].key || keys != 2 {
		t.Errorf("keyframes: first %v, %d in all; want the first and one a second (2)", fs[0].key, keys)
	}
	if d := fs[15].pts - fs[0].pts; d < 900*time.Millisecond || d > 1100*time.Millisecond {
		t.Errorf("15 frames span %v, want 1 s", d)
	}
}

func TestIVF(t *testing.T) {
	fs := readAll(t, newIVFReader(bytes.NewReader(encode(t, CodecVP8))))
	if len(fs) != 30 || !fs[0].key {
		t.Fatalf("%d frames, first key %v; want 30 starting with a keyframe", len(fs), len(fs) > 0 && fs[0].key)
	}
	if d := fs[15].pts - fs[0].pts; d < 900*time.Millisecond || d > 1100*time.Millisecond {
		t.Errorf("15 frames span %v, want 1 s", d)
	}
}

func TestFramesRejectGarbage(t *testing.T) {
	if _, err := newFLVReader(bytes.NewReader([]byte("not an flv stream at all"))).next(); err == nil {
		t.Error("FLV reader accepted garbage")
	}
	if _, err := newIVFReader(bytes.NewReader(bytes.Repeat([]byte{'x'}, 64))).next(); err == nil {
		t.Error("IVF reader accepted garbage")
	}
}
