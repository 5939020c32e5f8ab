package journal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path"

	"github.com/bookie-go/bookie/vfs"
	"github.com/cespare/xxhash/v2"
)

// Checkpoint file layout; see the package documentation. Part of the format.
const (
	checkpointName    = "CHECKPOINT"
	checkpointMagic   = "BKGOCKPT"
	checkpointVersion = 1
	checkpointSize    = 48
)

func encodeCheckpoint(m Mark) []byte {
	b := make([]byte, checkpointSize)
	copy(b, checkpointMagic)
	binary.LittleEndian.PutUint32(b[8:], checkpointVersion)
	binary.LittleEndian.PutUint64(b[16:], m.Segment)
	binary.LittleEndian.PutUint64(b[24:], uint64(m.Offset))
	binary.LittleEndian.PutUint64(b[32:], m.Seq)
	binary.LittleEndian.PutUint64(b[40:], xxhash.Sum64(b[:40]))
	return b
}

func decodeCheckpoint(b []byte) (Mark, error) {
	if len(b) != checkpointSize || string(b[:8]) != checkpointMagic {
		return Mark{}, errors.New("not a checkpoint file")
	}
	if binary.LittleEndian.Uint64(b[40:]) != xxhash.Sum64(b[:40]) {
		return Mark{}, errors.New("checksum mismatch")
	}
	if v := binary.LittleEndian.Uint32(b[8:]); v != checkpointVersion {
		return Mark{}, fmt.Errorf("unsupported version %d", v)
	}
	return Mark{
		Segment: binary.LittleEndian.Uint64(b[16:]),
		Offset:  int64(binary.LittleEndian.Uint64(b[24:])),
		Seq:     binary.LittleEndian.Uint64(b[32:]),
	}, nil
}

// readCheckpoint returns the durable mark in dir; the zero Mark if there is none.
func readCheckpoint(fs vfs.FS, dir string) (Mark, error) {
	name := path.Join(dir, checkpointName)
	b, err := vfs.ReadFile(fs, name)
	if errors.Is(err, os.ErrNotExist) {
		return Mark{}, nil
	}
	if err != nil {
		return Mark{}, fmt.Errorf("journal: read %s: %w", name, err)
	}
	m, err := decodeCheckpoint(b)
	if err != nil {
		// Written atomically, so never torn: damage is corruption.
		return Mark{}, fmt.Errorf("%w: %s: %v", ErrCorrupt, name, err)
	}
	return m, nil
}

// Checkpoint durably records m as the point before which the journal is no
// longer needed (the caller has made everything up to it durable
// elsewhere), then frees the segments wholly before it. m must come from a
// Completion or Record Pos. The mark only moves forward: an older mark
// returns ErrCheckpoint, as does one beyond what is durable. Safe for
// concurrent use; it writes a tmp file, fsyncs, renames and fsyncs the
// directory.
func (j *Journal) Checkpoint(m Mark) error {
	j.ckptMu.Lock()
	defer j.ckptMu.Unlock()
	cur := j.ckpt
	if m == cur {
		return nil
	}
	if m.Seq <= cur.Seq || m.Segment < cur.Segment || (m.Segment == cur.Segment && m.Offset <= cur.Offset) {
		return fmt.Errorf("%w: %+v is not after the current mark %+v", ErrCheckpoint, m, cur)
	}
	j.mu.Lock()
	durable := j.durable
	j.mu.Unlock()
	if m.Seq > durable.Seq || m.Segment > durable.Segment {
		return fmt.Errorf("%w: %+v is beyond the durable end %+v", ErrCheckpoint, m, durable)
	}
	name := path.Join(j.dir, checkpointName)
	if err := vfs.WriteFileAtomic(j.fs, name, encodeCheckpoint(m)); err != nil {
		return fmt.Errorf("journal: write checkpoint %s: %w", name, err)
	}
	j.ckpt = m
	names, err := j.fs.List(j.dir)
	if err != nil {
		return fmt.Errorf("journal: list %s: %w", j.dir, err)
	}
	for _, n := range names {
		num, ok := parseSegmentName(n)
		if !ok || num >= m.Segment {
			continue
		}
		if p := j.segmentPath(num); !j.factory.isFree(p) {
			if err := j.factory.release(p); err != nil {
				return err
			}
		}
	}
	return nil
}

// CheckpointMark returns the current durable checkpoint mark.
func (j *Journal) CheckpointMark() Mark {
	j.ckptMu.Lock()
	defer j.ckptMu.Unlock()
	return j.ckpt
}
