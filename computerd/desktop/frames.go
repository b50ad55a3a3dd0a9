package desktop

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"
)

// frame is one encoded picture: an H264 access unit in Annex-B form, or a
// VP8 frame.
type frame struct {
	data []byte
	key  bool
	pts  time.Duration // presentation time from the container
}

// frameReader yields the encoder's frames one by one.
type frameReader interface {
	next() (frame, error)
}

// maxFrame bounds one frame; a raw 4K picture is smaller.
const maxFrame = 16 << 20

var annexB = []byte{0, 0, 0, 1}

// flvReader reads H264 from an FLV stream (ffmpeg -f flv). FLV frames each
// picture with its size, so a frame is handed on the moment it is
// written, and its AVCC NAL units become Annex-B with SPS and PPS before
// every keyframe.
type flvReader struct {
	r       *bufio.Reader
	started bool
	nalLen  int
	params  [][]byte // SPS and PPS from the sequence header
}

func newFLVReader(r io.Reader) *flvReader {
	return &flvReader{r: bufio.NewReaderSize(r, 256<<10), nalLen: 4}
}

func (f *flvReader) next() (frame, error) {
	if !f.started {
		var hdr [13]byte // 9-byte header, then PreviousTagSize0
		if _, err := io.ReadFull(f.r, hdr[:]); err != nil {
			return frame{}, err
		}
		if string(hdr[:3]) != "FLV" {
			return frame{}, errors.New("flv: bad signature")
		}
		if skip := int(binary.BigEndian.Uint32(hdr[5:9])) - 9; skip > 0 {
			if _, err := f.r.Discard(skip); err != nil {
				return frame{}, err
			}
		}
		f.started = true
	}
	for {
		var th [11]byte
		if _, err := io.ReadFull(f.r, th[:]); err != nil {
			return frame{}, err
		}
		size := int(th[1])<<16 | int(th[2])<<8 | int(th[3])
		ts := time.Duration(uint32(th[7])<<24|uint32(th[4])<<16|uint32(th[5])<<8|uint32(th[6])) * time.Millisecond
		if size > maxFrame {
			return frame{}, fmt.Errorf("flv: tag of %d bytes", size)
		}
		body := make([]byte, size+4) // and the PreviousTagSize after it
		if _, err := io.ReadFull(f.r, body); err != nil {
			return frame{}, err
		}
		body = body[:size]
		if th[0] != 9 || len(body) < 5 || body[0]&0x0f != 7 {
			continue // not AVC video
		}
		key := body[0]>>4 == 1
		switch body[1] {
		case 0:
			if err := f.sequenceHeader(body[5:]); err != nil {
				return frame{}, err
			}
			continue
		case 1:
		default:
			continue
		}
		out, err := f.annexB(body[5:], key)
		if err != nil {
			return frame{}, err
		}
		if len(out) == 0 {
			continue
		}
		return frame{data: out, key: key, pts: ts}, nil
	}
}

// sequenceHeader reads an AVCDecoderConfigurationRecord.
func (f *flvReader) sequenceHeader(b []byte) error {
	if len(b) < 7 {
		return errors.New("flv: short AVC sequence header")
	}
	f.nalLen = int(b[4]&3) + 1
	f.params = f.params[:0]
	p := b[5:]
	for _, mask := range []byte{0x1f, 0xff} {
		if len(p) < 1 {
			return errors.New("flv: short AVC sequence header")
		}
		n := int(p[0] & mask)
		p = p[1:]
		for range n {
			if len(p) < 2 {
				return errors.New("flv: short AVC sequence header")
			}
			l := int(binary.BigEndian.Uint16(p))
			if len(p) < 2+l {
				return errors.New("flv: short AVC parameter set")
			}
			f.params = append(f.params, append([]byte(nil), p[2:2+l]...))
			p = p[2+l:]
		}
	}
	return nil
}

// annexB turns length-prefixed NAL units into start-code-prefixed ones;
// keyframes get the parameter sets in front unless they carry their own.
func (f *flvReader) annexB(b []byte, key bool) ([]byte, error) {
	out := make([]byte, 0, len(b)+64)
	hasSPS := false
	var nals [][]byte
	for len(b) > 0 {
		if len(b) < f.nalLen {
			return nil, errors.New("flv: truncated NAL length")
		}
		var l int
		for i := range f.nalLen {
			l = l<<8 | int(b[i])
		}
		b = b[f.nalLen:]
		if l > len(b) {
			return nil, errors.New("flv: truncated NAL unit")
		}
		nal := b[:l]
		b = b[l:]
		if len(nal) == 0 {
			continue
		}
		switch nal[0] & 0x1f {
		case 7:
			hasSPS = true
		case 9: // access unit delimiter: not needed on RTP
			continue
		}
		nals = append(nals, nal)
	}
	if key && !hasSPS {
		for _, p := range f.params {
			out = append(out, annexB...)
			out = append(out, p...)
		}
	}
	for _, nal := range nals {
		out = append(out, annexB...)
		out = append(out, nal...)
	}
	return out, nil
}

// ivfReader reads VP8 frames from an IVF stream (ffmpeg -f ivf).
type ivfReader struct {
	r       *bufio.Reader
	started bool
	rate    uint32
	scale   uint32
}

func newIVFReader(r io.Reader) *ivfReader {
	return &ivfReader{r: bufio.NewReaderSize(r, 256<<10)}
}

func (v *ivfReader) next() (frame, error) {
	if !v.started {
		var hdr [32]byte
		if _, err := io.ReadFull(v.r, hdr[:]); err != nil {
			return frame{}, err
		}
		if string(hdr[:4]) != "DKIF" {
			return frame{}, errors.New("ivf: bad signature")
		}
		v.rate = binary.LittleEndian.Uint32(hdr[16:20])
		v.scale = binary.LittleEndian.Uint32(hdr[20:24])
		if v.rate == 0 || v.scale == 0 {
			v.rate, v.scale = 1000, 1
		}
		if hl := int(binary.LittleEndian.Uint16(hdr[6:8])); hl > 32 {
			if _, err := v.r.Discard(hl - 32); err != nil {
				return frame{}, err
			}
		}
		v.started = true
	}
	var fh [12]byte
	if _, err := io.ReadFull(v.r, fh[:]); err != nil {
		return frame{}, err
	}
	size := binary.LittleEndian.Uint32(fh[:4])
	if size == 0 || size > maxFrame {
		return frame{}, fmt.Errorf("ivf: frame of %d bytes", size)
	}
	pts := binary.LittleEndian.Uint64(fh[4:])
	data := make([]byte, size)
	if _, err := io.ReadFull(v.r, data); err != nil {
		return frame{}, err
	}
	d := time.Duration(float64(pts) * float64(v.scale) / float64(v.rate) * float64(time.Second))
	return frame{data: data, key: data[0]&1 == 0, pts: d}, nil
}
