package objstore

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"strings"

	"github.com/berthdev/berth/internal/secrets"
)

// Encrypted is a Store that seals objects before handing them to another
// Store and checks them as they come back. Each object gets a fresh
// AES-256 key, sealed with the supervisor's key (a secrets.Box) and bound
// to the object's key, so that an object copied to another key does not
// open. The stream is cut into chunks of ChunkSize bytes, each sealed with
// AES-256-GCM under a nonce made from its index, with the index and a
// final-chunk flag in the additional data; a last chunk carries the
// plaintext's length and SHA-256. A reader therefore sees an error, never
// io.EOF, when any byte was changed, the object was cut short, extended,
// or had chunks reordered, dropped or taken from another object, or the
// supervisor's key is not the one it was sealed with; and it never hands
// out a chunk's bytes before that chunk has been authenticated.
//
// The SHA-256 of the plaintext is returned by Put in Metadata[MetaSHA256],
// for the caller to record beside its own record of the object; the
// stored object carries it inside its sealed last chunk. The reader checks
// the length there but does not hash the plaintext again: every chunk's
// tag already authenticates its bytes, its place and whether it is the
// last. Stat and List report the plaintext's size.
type Encrypted struct {
	inner     Store
	box       *secrets.Box
	headerLen int64 // the header's length: fixed for a Box
}

// Metadata the encryption layer sets; user metadata may not use names
// starting with "berth-".
const (
	// MetaEncryption names the object's format on the inner store.
	MetaEncryption = "berth-encryption"
	// MetaSHA256 is the hex SHA-256 of the plaintext, in the Info that Put
	// returns.
	MetaSHA256 = "berth-sha256"

	reservedMetaPrefix = "berth-"
	formatName         = "aes-256-gcm-chunked-1"
)

// ChunkSize is the plaintext size of an encrypted object's chunks.
const ChunkSize = 64 << 10

const (
	encMagic      = "BERTHENC"
	encVersion    = 1
	frameHead     = 5  // flag byte and the ciphertext's length
	tagSize       = 16 // GCM
	trailerSize   = 8 + sha256.Size
	flagData      = 0
	flagFinal     = 1
	maxSealedKey  = 512
	finalFrameLen = frameHead + trailerSize + tagSize
	dataFrameLen  = frameHead + ChunkSize + tagSize
)

// NewEncrypted returns a Store that encrypts into inner with keys sealed
// by box.
func NewEncrypted(inner Store, box *secrets.Box) (*Encrypted, error) {
	if inner == nil || box == nil {
		return nil, errors.New("objstore: an encrypted store needs a store and a box")
	}
	sealed, err := box.Seal(make([]byte, 32), sealAD("x"))
	if err != nil {
		return nil, err
	}
	return &Encrypted{inner: inner, box: box, headerLen: int64(len(encMagic) + 1 + 4 + 2 + len(sealed))}, nil
}

func sealAD(key string) string { return "berth-objstore-key:" + key }

// Put implements Store. The Info it returns has Size (the plaintext's)
// and Metadata[MetaSHA256].
func (e *Encrypted) Put(ctx context.Context, key string, r io.Reader, meta map[string]string) (Info, error) {
	if err := ValidateKey(key); err != nil {
		return Info{}, err
	}
	for name := range meta {
		if strings.HasPrefix(name, reservedMetaPrefix) {
			return Info{}, fmt.Errorf("%w: name %q: names starting with %q are reserved", ErrInvalidMetadata, name, reservedMetaPrefix)
		}
	}
	inner := cloneMeta(meta)
	if inner == nil {
		inner = map[string]string{}
	}
	inner[MetaEncryption] = formatName
	enc, err := e.newEncryptor(key, r)
	if err != nil {
		return Info{}, fmt.Errorf("objstore: put %s: %w", key, err)
	}
	info, err := e.inner.Put(ctx, key, enc, inner)
	if err != nil {
		return Info{}, err
	}
	if !enc.done {
		return Info{}, fmt.Errorf("objstore: put %s: the store stopped reading before the end", key)
	}
	info.Size = enc.size
	info.Metadata = cloneMeta(meta)
	if info.Metadata == nil {
		info.Metadata = map[string]string{}
	}
	info.Metadata[MetaSHA256] = hex.EncodeToString(enc.sum)
	return info, nil
}

// Get implements Store. The object's header is read and its key opened
// before Get returns, so a wrong supervisor key fails here; every later
// defect fails a Read.
func (e *Encrypted) Get(ctx context.Context, key string) (io.ReadCloser, Info, error) {
	rc, info, err := e.inner.Get(ctx, key)
	if err != nil {
		return nil, Info{}, err
	}
	d, err := e.newDecryptor(key, rc)
	if err != nil {
		rc.Close()
		return nil, Info{}, err
	}
	return d, e.outer(info), nil
}

// Stat implements Store.
func (e *Encrypted) Stat(ctx context.Context, key string) (Info, error) {
	info, err := e.inner.Stat(ctx, key)
	if err != nil {
		return Info{}, err
	}
	return e.outer(info), nil
}

// Delete implements Store.
func (e *Encrypted) Delete(ctx context.Context, key string) error { return e.inner.Delete(ctx, key) }

// List implements Store.
func (e *Encrypted) List(ctx context.Context, prefix string) ([]Info, error) {
	infos, err := e.inner.List(ctx, prefix)
	for i := range infos {
		infos[i] = e.outer(infos[i])
	}
	return infos, err
}

// outer turns the inner store's Info into the plaintext's.
func (e *Encrypted) outer(info Info) Info {
	info.Size = e.plainSize(info.Size)
	if info.Metadata != nil {
		meta := make(map[string]string, len(info.Metadata))
		for k, v := range info.Metadata {
			if !strings.HasPrefix(k, reservedMetaPrefix) {
				meta[k] = v
			}
		}
		info.Metadata = meta
	}
	return info
}

// plainSize is the plaintext size of an object of n bytes in the format
// this store writes, or -1 when n cannot be one.
func (e *Encrypted) plainSize(n int64) int64 {
	d := n - e.headerLen - finalFrameLen
	if d < 0 {
		return -1
	}
	frames := (d + dataFrameLen - 1) / dataFrameLen
	if p := d - frames*(frameHead+tagSize); p >= 0 {
		return p
	}
	return -1
}

func newGCM(key []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// nonce is the chunk index, big-endian, in the last 8 of 12 bytes: each
// object has its own key, so a counter never repeats under one key.
func nonce(buf *[12]byte, idx uint64) []byte {
	binary.BigEndian.PutUint64(buf[4:], idx)
	return buf[:]
}

// ad is the additional data of a chunk: the object's header, the chunk's
// index and its flag.
func ad(buf []byte, header []byte, idx uint64, flag byte) []byte {
	buf = append(buf[:0], header...)
	buf = binary.BigEndian.AppendUint64(buf, idx)
	return append(buf, flag)
}

// encryptor is the sealed stream of a plaintext, read by the inner
// store's Put.
type encryptor struct {
	src    io.Reader
	aead   cipher.AEAD
	header []byte
	out    []byte // the sealed bytes not yet read
	frame  []byte // out's buffer
	pt     []byte
	adBuf  []byte
	nonce  [12]byte
	idx    uint64
	hash   hash.Hash
	size   int64
	err    error // the source's error, once met
	ended  bool  // the final chunk is in out
	done   bool  // and was read
	sum    []byte
}

func (e *Encrypted) newEncryptor(key string, src io.Reader) (*encryptor, error) {
	objKey := make([]byte, 32)
	if _, err := rand.Read(objKey); err != nil {
		return nil, err
	}
	aead, err := newGCM(objKey)
	if err != nil {
		return nil, err
	}
	sealed, err := e.box.Seal(objKey, sealAD(key))
	if err != nil {
		return nil, err
	}
	h := make([]byte, 0, e.headerLen)
	h = append(h, encMagic...)
	h = append(h, encVersion)
	h = binary.BigEndian.AppendUint32(h, ChunkSize)
	h = binary.BigEndian.AppendUint16(h, uint16(len(sealed)))
	h = append(h, sealed...)
	enc := &encryptor{
		src: src, aead: aead, header: h, hash: sha256.New(),
		pt: make([]byte, ChunkSize), frame: make([]byte, 0, dataFrameLen),
	}
	enc.out = h
	return enc, nil
}

// Read fills p with as many sealed chunks as it holds, so that a large
// buffer is written to the store in large writes.
func (w *encryptor) Read(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	n := 0
	for n < len(p) {
		if len(w.out) == 0 {
			if w.ended {
				if n == 0 {
					w.done = true
					return 0, io.EOF
				}
				break
			}
			if err := w.next(); err != nil {
				w.err = err // answered by the next Read
				break
			}
			continue
		}
		k := copy(p[n:], w.out)
		w.out = w.out[k:]
		n += k
	}
	if n == 0 && w.err != nil {
		return 0, w.err
	}
	return n, nil
}

// next seals the next chunk into out: a data chunk while the source has
// bytes, then the final chunk.
func (w *encryptor) next() error {
	n, err := io.ReadFull(w.src, w.pt)
	switch {
	case err == io.EOF || err == io.ErrUnexpectedEOF:
	case err != nil:
		return err
	}
	if n > 0 {
		w.hash.Write(w.pt[:n])
		w.size += int64(n)
		w.seal(flagData, w.pt[:n])
		return nil
	}
	w.sum = w.hash.Sum(nil)
	trailer := binary.BigEndian.AppendUint64(make([]byte, 0, trailerSize), uint64(w.size))
	trailer = append(trailer, w.sum...)
	w.seal(flagFinal, trailer)
	w.ended = true
	return nil
}

func (w *encryptor) seal(flag byte, pt []byte) {
	buf := append(w.frame[:0], flag)
	buf = binary.BigEndian.AppendUint32(buf, uint32(len(pt)+tagSize))
	w.adBuf = ad(w.adBuf, w.header, w.idx, flag)
	w.out = w.aead.Seal(buf, nonce(&w.nonce, w.idx), pt, w.adBuf)
	w.idx++
}

// decryptor checks and opens an encrypted object as it is read.
type decryptor struct {
	key    string
	src    io.ReadCloser
	aead   cipher.AEAD
	header []byte
	buf    []byte // the frame being opened
	out    []byte // opened bytes not yet read
	adBuf  []byte
	nonce  [12]byte
	idx    uint64
	size   int64
	err    error // sticky: io.EOF once the object checked out
}

func (e *Encrypted) newDecryptor(key string, src io.ReadCloser) (*decryptor, error) {
	d := &decryptor{key: key, src: src}
	pre := make([]byte, len(encMagic)+1+4+2)
	if _, err := io.ReadFull(src, pre); err != nil {
		return nil, d.fail(err, "its header is cut short")
	}
	if !bytes.Equal(pre[:len(encMagic)], []byte(encMagic)) {
		return nil, d.tampered("it does not start with an encrypted object's header")
	}
	if v := pre[len(encMagic)]; v != encVersion {
		return nil, d.tampered(fmt.Sprintf("unknown format version %d", v))
	}
	if cs := binary.BigEndian.Uint32(pre[len(encMagic)+1:]); cs != ChunkSize {
		return nil, d.tampered(fmt.Sprintf("chunk size %d, want %d", cs, ChunkSize))
	}
	klen := int(binary.BigEndian.Uint16(pre[len(encMagic)+5:]))
	if klen > maxSealedKey {
		return nil, d.tampered(fmt.Sprintf("sealed key of %d bytes", klen))
	}
	sealed := make([]byte, klen)
	if _, err := io.ReadFull(src, sealed); err != nil {
		return nil, d.fail(err, "its header is cut short")
	}
	objKey, err := e.box.Open(string(sealed), sealAD(key))
	if err != nil || len(objKey) != 32 {
		return nil, d.tampered("its key does not open: the supervisor's key is not the one it was sealed with, or the object was altered or moved from another key")
	}
	if d.aead, err = newGCM(objKey); err != nil {
		return nil, err
	}
	d.header = append(pre, sealed...)
	d.buf = make([]byte, dataFrameLen)
	return d, nil
}

func (d *decryptor) tampered(why string) error {
	return fmt.Errorf("%w: %s: %s", ErrTampered, d.key, why)
}

// fail turns a read error into the reader's error: an early end of the
// stream is tampering, anything else (a network error) stays itself.
func (d *decryptor) fail(err error, why string) error {
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return d.tampered(why)
	}
	return fmt.Errorf("objstore: read %s: %w", d.key, err)
}

func (d *decryptor) Read(p []byte) (int, error) {
	for len(d.out) == 0 {
		if d.err != nil {
			return 0, d.err
		}
		d.err = d.next()
	}
	n := copy(p, d.out)
	d.out = d.out[n:]
	return n, nil
}

// next opens the next frame into out; after the final frame it checks the
// length and the end of the stream, and returns io.EOF.
func (d *decryptor) next() error {
	head := d.buf[:frameHead]
	if _, err := io.ReadFull(d.src, head); err != nil {
		return d.fail(err, fmt.Sprintf("it ends before its final chunk (after %d chunks)", d.idx))
	}
	flag, n := head[0], int(binary.BigEndian.Uint32(head[1:]))
	switch {
	case flag == flagData && n > tagSize && n <= ChunkSize+tagSize:
	case flag == flagFinal && n == trailerSize+tagSize:
	default:
		return d.tampered(fmt.Sprintf("chunk %d has a bad frame (flag %d, %d bytes)", d.idx, flag, n))
	}
	ct := d.buf[frameHead : frameHead+n]
	if _, err := io.ReadFull(d.src, ct); err != nil {
		return d.fail(err, fmt.Sprintf("chunk %d is cut short", d.idx))
	}
	d.adBuf = ad(d.adBuf, d.header, d.idx, flag)
	pt, err := d.aead.Open(ct[:0], nonce(&d.nonce, d.idx), ct, d.adBuf)
	if err != nil {
		return d.tampered(fmt.Sprintf("chunk %d does not authenticate (altered, reordered, or from another object)", d.idx))
	}
	d.idx++
	if flag == flagData {
		d.size += int64(len(pt))
		d.out = pt
		return nil
	}
	if size := int64(binary.BigEndian.Uint64(pt)); size != d.size {
		return d.tampered(fmt.Sprintf("it holds %d bytes but was written with %d", d.size, size))
	}
	var one [1]byte
	if k, err := io.ReadFull(d.src, one[:]); k > 0 {
		return d.tampered("bytes follow its final chunk")
	} else if err != io.EOF {
		return d.fail(err, "")
	}
	return io.EOF
}

func (d *decryptor) Close() error { return d.src.Close() }

var _ Store = (*Encrypted)(nil)
