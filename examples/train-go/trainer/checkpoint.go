package trainer

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"
)

// Checkpoint layout, following gangway's convention:
//
//	$GANGWAY_CHECKPOINT_DIR/<step>/state.bin   parameters, momentum, step, loss
//	$GANGWAY_CHECKPOINT_DIR/<step>/meta.json   the same facts for people
//	$GANGWAY_CHECKPOINT_DIR/<step>/COMMITTED   empty; written last
//
// A directory without COMMITTED is a checkpoint that was being written when
// its writer died, and is never read.
const (
	// CommittedMarker is the file whose presence commits a checkpoint
	// directory.
	CommittedMarker = "COMMITTED"
	stateFile       = "state.bin"
	metaFile        = "meta.json"
)

// state is everything needed to continue training bit for bit.
type state struct {
	Step     int       // last completed step
	Seed     uint64    // --seed of the run that wrote it
	Loss     float64   // mean loss of step Step
	Params   []float64 // flat parameters
	Velocity []float64 // momentum buffer, same length as Params
}

// state.bin: magic, then step, seed, parameter count (uint64), loss
// (float64 bits), parameters, velocities, and a CRC-32 (IEEE) of all
// preceding bytes; little-endian.
var stateMagic = [8]byte{'G', 'W', 'T', 'R', 'A', 'I', 'N', 1}

const stateHeaderLen = 8 + 4*8

func encodeState(s state) []byte {
	n := len(s.Params)
	b := make([]byte, 0, stateHeaderLen+16*n+4)
	b = append(b, stateMagic[:]...)
	b = binary.LittleEndian.AppendUint64(b, uint64(s.Step))
	b = binary.LittleEndian.AppendUint64(b, s.Seed)
	b = binary.LittleEndian.AppendUint64(b, uint64(n))
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(s.Loss))
	for _, f := range s.Params {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(f))
	}
	for _, f := range s.Velocity {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(f))
	}
	return binary.LittleEndian.AppendUint32(b, crc32.ChecksumIEEE(b))
}

// decodeState parses state.bin, naming the byte offset of what is wrong.
func decodeState(b []byte) (state, error) {
	if len(b) < stateHeaderLen+4 {
		return state{}, fmt.Errorf("%d bytes is shorter than the %d-byte header", len(b), stateHeaderLen+4)
	}
	if [8]byte(b[:8]) != stateMagic {
		return state{}, fmt.Errorf("offset 0: bad magic %q; not a train-example state file of format 1", b[:8])
	}
	body, sum := b[:len(b)-4], binary.LittleEndian.Uint32(b[len(b)-4:])
	if got := crc32.ChecksumIEEE(body); got != sum {
		return state{}, fmt.Errorf("offset %d: checksum %#08x, computed %#08x; the file is corrupt", len(body), sum, got)
	}
	step := binary.LittleEndian.Uint64(b[8:])
	seed := binary.LittleEndian.Uint64(b[16:])
	n := binary.LittleEndian.Uint64(b[24:])
	if step > math.MaxInt32 {
		return state{}, fmt.Errorf("offset 8: step %d is out of range", step)
	}
	if want := uint64(len(body) - stateHeaderLen); n > want/16 || 16*n != want {
		return state{}, fmt.Errorf("offset 24: %d parameters need %d bytes of data, the file has %d", n, 16*n, want)
	}
	s := state{
		Step:     int(step),
		Seed:     seed,
		Loss:     math.Float64frombits(binary.LittleEndian.Uint64(b[32:])),
		Params:   make([]float64, n),
		Velocity: make([]float64, n),
	}
	data := body[stateHeaderLen:]
	for i := range s.Params {
		s.Params[i] = math.Float64frombits(binary.LittleEndian.Uint64(data[8*i:]))
	}
	data = data[8*n:]
	for i := range s.Velocity {
		s.Velocity[i] = math.Float64frombits(binary.LittleEndian.Uint64(data[8*i:]))
	}
	return s, nil
}

// checkpointMeta is meta.json: not read back, there for people and tools.
type checkpointMeta struct {
	Format    string  `json:"format"`
	Step      int     `json:"step"`
	Loss      float64 `json:"loss"`
	Seed      uint64  `json:"seed"`
	Params    int     `json:"params"`
	WorldSize int     `json:"world_size"`
	JobID     string  `json:"job_id,omitempty"`
	Attempt   int     `json:"attempt"`
}

// writeCheckpoint writes s into root/<step>/ and commits it: data files
// are fsynced, then the marker is written and fsynced, then the
// directories. An uncommitted directory of the same step (left by a writer
// that died) is replaced; a committed one is left alone and reported as
// already there.
func writeCheckpoint(root string, s state, meta checkpointMeta) (dir string, already bool, err error) {
	dir = filepath.Join(root, strconv.Itoa(s.Step))
	if _, err := os.Stat(filepath.Join(dir, CommittedMarker)); err == nil {
		return dir, true, nil
	}
	if err := os.RemoveAll(dir); err != nil {
		return dir, false, fmt.Errorf("remove uncommitted checkpoint %s: %w", dir, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return dir, false, fmt.Errorf("create checkpoint dir: %w", err)
	}
	metaJSON, err := json.MarshalIndent(meta, "", "  ")
	if err != nil {
		return dir, false, err
	}
	files := []struct {
		name string
		data []byte
	}{
		{stateFile, encodeState(s)},
		{metaFile, append(metaJSON, '\n')},
		{CommittedMarker, nil}, // last: its presence commits the rest
	}
	for _, f := range files {
		if err := writeFileSync(filepath.Join(dir, f.name), f.data); err != nil {
			return dir, false, fmt.Errorf("write checkpoint %s: %w", dir, err)
		}
		if f.name == metaFile {
			if err := syncDir(dir); err != nil { // data durable before the marker exists
				return dir, false, fmt.Errorf("write checkpoint %s: %w", dir, err)
			}
		}
	}
	if err := syncDir(dir); err != nil {
		return dir, false, fmt.Errorf("write checkpoint %s: %w", dir, err)
	}
	if err := syncDir(root); err != nil {
		return dir, false, fmt.Errorf("write checkpoint %s: %w", dir, err)
	}
	return dir, false, nil
}

func writeFileSync(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// readCheckpoint loads a committed checkpoint directory.
func readCheckpoint(dir string) (state, error) {
	if _, err := os.Stat(filepath.Join(dir, CommittedMarker)); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return state{}, fmt.Errorf("checkpoint %s has no %s marker: it was never committed and must not be resumed from", dir, CommittedMarker)
		}
		return state{}, fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	b, err := os.ReadFile(filepath.Join(dir, stateFile))
	if err != nil {
		return state{}, fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	s, err := decodeState(b)
	if err != nil {
		return state{}, fmt.Errorf("checkpoint %s: %s: %w", dir, stateFile, err)
	}
	return s, nil
}

// NewestCommitted returns the committed checkpoint directory with the
// highest step under root, following gangway's convention (step-named
// directories, committed by a COMMITTED marker). Directories without the
// marker and entries whose names are not plain decimal steps are ignored.
// ok is false when root holds no committed checkpoint; a missing root is
// not an error.
func NewestCommitted(root string) (dir string, step int, ok bool, err error) {
	entries, err := os.ReadDir(root)
	if errors.Is(err, fs.ErrNotExist) {
		return "", 0, false, nil
	}
	if err != nil {
		return "", 0, false, fmt.Errorf("list checkpoints: %w", err)
	}
	for _, e := range entries {
		s, err := strconv.Atoi(e.Name())
		if err != nil || s < 0 || strconv.Itoa(s) != e.Name() || !e.IsDir() {
			continue
		}
		if _, err := os.Stat(filepath.Join(root, e.Name(), CommittedMarker)); err != nil {
			continue
		}
		if !ok || s > step {
			dir, step, ok = filepath.Join(root, e.Name()), s, true
		}
	}
	return dir, step, ok, nil
}
