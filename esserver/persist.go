package esserver

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Persistence (Open) keeps a server's indices in a data directory:
//
//	LOCK                       flock'ed by the one server that owns the directory
//	snapshot                   the whole state as of the start of log generation G
//	log-<G>, log-<G+1>, …      every mutation since, in order
//
// Both files are sequences of frames: a 4-byte big-endian payload length, the
// CRC-32C of the payload, then the payload, whose first byte is its kind. A
// log record is a state assignment (this index's metadata is now M, this
// document is now D, this index is gone), so replaying it is deterministic:
// it never depends on the clock, on auto-generated ids or on the order of map
// iteration.
//
// A request's records reach the log before its answer is sent: every write
// request appends its records in memory while it holds the server lock, and
// before answering, writes whatever is buffered and fsyncs once (concurrent
// requests share that fsync). A _bulk of 1000 documents costs one fsync, not
// 1000.
const (
	recHeader byte = 'H' // snapshot only: {"format":1,"generation":G}
	recMeta   byte = 'M' // an index's metadata (JSON, see persistedIndex)
	recDoc    byte = 'D' // a document version or a delete tombstone (binary)
	recDrop   byte = 'X' // an index was deleted: the index name
	recEnd    byte = 'E' // snapshot only: the number of records before it

	persistFormat = 1
	frameHeader   = 8
	// maxFrame bounds a frame's length so that a corrupt length cannot make
	// replay allocate gigabytes: a document is at most the body limit.
	maxFrame = 1 << 30

	snapshotName = "snapshot"
	logPrefix    = "log-"
	lockName     = "LOCK"
	// compactMinBytes is the log size from which a write triggers a
	// compaction, once the log is also larger than the last snapshot.
	compactMinBytes = 64 << 20
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// ErrDataDirLocked means another process (or another Server in this process)
// holds the data directory.
var ErrDataDirLocked = errors.New("esserver: data directory is in use by another server")

// ErrClosed is returned by writes to a persistent server after Close.
var ErrClosed = errors.New("esserver: server closed")

// CorruptError reports a snapshot or a log that cannot be read back. A torn
// tail of the newest log is not corruption (see Recovery.TornBytes).
type CorruptError struct {
	File   string
	Offset int64
	Reason string
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("esserver: %s is corrupt at offset %d: %s", e.File, e.Offset, e.Reason)
}

// Recovery describes what Open read back from the data directory.
type Recovery struct {
	Indices    int   // indices restored
	Documents  int   // live documents restored (tombstones not counted)
	LogRecords int   // log records replayed on top of the snapshot
	TornBytes  int64 // bytes cut off the end of the newest log: a write that was never acknowledged
}

// store is the on-disk side of a persistent Server.
type store struct {
	dir  string
	lock *os.File

	// mu guards the fields below; it is taken while the server lock is held
	// (append) and without it (sync), never the other way round.
	mu       sync.Mutex
	buf      []byte
	appended uint64 // bytes ever appended to buf
	durable  uint64 // bytes ever written and fsynced
	log      *os.File
	gen      uint64
	logSize  int64
	snapSize int64
	err      error // sticky: memory and disk may differ from here on
	closed   bool

	syncMu     sync.Mutex // one write+fsync (or log switch) at a time
	compacting atomic.Bool
	recovery   Recovery
}

// Open returns a server whose indices are kept in dir, creating dir if
// needed. It replays the snapshot and the logs found there, so a server
// opened on the directory of a closed (or crashed) one answers every
// acknowledged write the way that one did: the same documents, _version,
// _seq_no and _primary_term, mappings, settings and aliases. After a restart
// every document is visible to search, as after Elasticsearch's recovery.
//
// Only one server may hold dir at a time (ErrDataDirLocked). Close flushes
// and releases it. A log whose last record is incomplete or fails its
// checksum was cut off mid-write; that record was never acknowledged and is
// dropped (Recovery.TornBytes). Any other damage is a *CorruptError and Open
// fails rather than serve partial data.
func Open(dir string, opts ...Option) (*Server, error) {
	s := New(opts...)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("esserver: data dir: %w", err)
	}
	lf, err := os.OpenFile(filepath.Join(dir, lockName), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("esserver: lock file: %w", err)
	}
	if err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = lf.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s", ErrDataDirLocked, dir)
		}
		return nil, fmt.Errorf("esserver: lock %s: %w", dir, err)
	}
	st := &store{dir: dir, lock: lf}
	if err := s.load(st); err != nil {
		_ = lf.Close()
		return nil, err
	}
	s.store = st
	// Start from a fresh snapshot and an empty log: the torn tail, if any,
	// is gone, and the next start replays nothing twice.
	if err := s.compact(); err != nil {
		_ = s.Close()
		return nil, err
	}
	return s, nil
}

// Recovery reports what Open read back; zero for an in-memory server.
func (s *Server) Recovery() Recovery {
	if s.store == nil {
		return Recovery{}
	}
	return s.store.recovery
}

// Close makes every write durable, compacts the log into a fresh snapshot
// and releases the data directory. Writes after Close fail. Close on an
// in-memory server does nothing.
func (s *Server) Close() error {
	st := s.store
	if st == nil {
		return nil
	}
	err := st.sync()
	if err == nil {
		err = s.compact()
	}
	st.syncMu.Lock()
	st.mu.Lock()
	if !st.closed {
		st.closed = true
		if st.log != nil {
			if cerr := st.log.Close(); err == nil && cerr != nil {
				err = cerr
			}
		}
		_ = st.lock.Close() // releases the flock
		st.err = ErrClosed
	} else if errors.Is(err, ErrClosed) {
		err = nil // closing twice is harmless
	}
	st.mu.Unlock()
	st.syncMu.Unlock()
	if err != nil {
		return fmt.Errorf("esserver: close: %w", err)
	}
	return nil
}

// --- recording (caller holds s.mu for writing) ----------------------------

func (st *store) append(payload []byte) {
	st.mu.Lock()
	n := len(st.buf)
	st.buf = appendFrame(st.buf, payload)
	st.appended += uint64(len(st.buf) - n)
	st.mu.Unlock()
}

func (st *store) fail(err error) {
	st.mu.Lock()
	if st.err == nil {
		st.err = err
	}
	st.mu.Unlock()
}

func appendFrame(b, payload []byte) []byte {
	var h [frameHeader]byte
	binary.BigEndian.PutUint32(h[0:4], uint32(len(payload)))
	binary.BigEndian.PutUint32(h[4:8], crc32.Checksum(payload, crcTable))
	b = append(b, h[:]...)
	return append(b, payload...)
}

// journalMeta records ix's metadata (settings, mapping, aliases).
func (s *Server) journalMeta(ix *index) {
	if s.store == nil {
		return
	}
	p, err := encodeMeta(ix)
	if err != nil {
		s.store.fail(err)
		return
	}
	s.store.append(p)
}

// journalDrop records that the index name was deleted.
func (s *Server) journalDrop(name string) {
	if s.store == nil {
		return
	}
	s.store.append(append([]byte{recDrop}, name...))
}

// journalDoc records a new document version or tombstone of ix.
func (s *Server) journalDoc(ix *index, e *docEntry) {
	if s.store == nil {
		return
	}
	s.store.mu.Lock()
	n := len(s.store.buf)
	s.store.buf = appendDocFrame(s.store.buf, ix.name, e)
	s.store.appended += uint64(len(s.store.buf) - n)
	s.store.mu.Unlock()
}

// appendDocFrame appends a doc record's frame without an intermediate copy.
func appendDocFrame(b []byte, indexName string, e *docEntry) []byte {
	start := len(b)
	b = append(b, make([]byte, frameHeader)...)
	b = append(b, recDoc)
	b = binary.AppendUvarint(b, uint64(len(indexName)))
	b = append(b, indexName...)
	b = binary.AppendUvarint(b, uint64(len(e.id)))
	b = append(b, e.id...)
	b = binary.AppendVarint(b, e.version)
	b = binary.AppendVarint(b, e.seqNo)
	b = binary.AppendVarint(b, e.primaryTerm)
	b = binary.AppendVarint(b, e.order)
	if e.deleted {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	b = append(b, e.source...)
	payload := b[start+frameHeader:]
	binary.BigEndian.PutUint32(b[start:start+4], uint32(len(payload)))
	binary.BigEndian.PutUint32(b[start+4:start+8], crc32.Checksum(payload, crcTable))
	return b
}

// aliasesChanged reports whether two alias tables differ.
func aliasesChanged(a, b map[string]*aliasMeta) bool {
	if len(a) != len(b) {
		return true
	}
	for k, v := range a {
		if b[k] != v {
			return true
		}
	}
	return false
}

// --- durability -------------------------------------------------------------

// sync writes every record appended so far to the log and fsyncs it. A
// request calls it after its handler and before it answers; concurrent
// callers share one fsync.
func (st *store) sync() error {
	st.mu.Lock()
	target, err := st.appended, st.err
	st.mu.Unlock()
	if err != nil {
		return err
	}
	st.syncMu.Lock()
	defer st.syncMu.Unlock()
	return st.flushLocked(target)
}

// flushLocked writes the buffer and fsyncs; the caller holds syncMu.
func (st *store) flushLocked(target uint64) error {
	st.mu.Lock()
	if st.err != nil {
		err := st.err
		st.mu.Unlock()
		return err
	}
	if st.durable >= target {
		st.mu.Unlock()
		return nil
	}
	data, upto, f := st.buf, st.appended, st.log
	if len(data) == 0 {
		st.durable = upto
		st.mu.Unlock()
		return nil
	}
	st.buf = nil
	st.mu.Unlock()

	_, err := f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if err != nil {
		st.err = fmt.Errorf("esserver: write log %s: %w", f.Name(), err)
		return st.err
	}
	st.durable = upto
	st.logSize += int64(len(data))
	if cap(data) <= 4<<20 && st.buf == nil {
		st.buf = data[:0] // reuse the buffer unless it grew huge
	}
	return nil
}

// persistError is the answer to a write whose records could not be made
// durable: the change is in memory but would not survive a restart.
func persistError(err error) response {
	e := newErr(http.StatusInternalServerError, "translog_exception", "failed to persist the write: %s", err.Error())
	return errResp(e)
}

// afterWrite makes the request's writes durable, and compacts the log once
// it has grown large. It runs before the answer is sent.
func (s *Server) afterWrite(resp response) response {
	st := s.store
	if err := st.sync(); err != nil {
		return persistError(err)
	}
	st.mu.Lock()
	big := st.logSize >= compactMinBytes && st.logSize > st.snapSize
	st.mu.Unlock()
	if big && st.compacting.CompareAndSwap(false, true) {
		defer st.compacting.Store(false)
		if err := s.compact(); err != nil {
			st.fail(err)
			return persistError(err)
		}
	}
	return resp
}

// --- snapshot and compaction ------------------------------------------------

type snapIndex struct {
	name string
	meta []byte
	docs []*docEntry
}

// compact writes a snapshot of the whole state and starts a new log
// generation; older logs are removed once the snapshot is in place. The
// server answers reads meanwhile, and writes wait only while the state is
// copied (document versions are immutable, so the copy is shallow).
func (s *Server) compact() error {
	st := s.store
	s.mu.RLock()
	st.syncMu.Lock()
	err := st.flushLocked(^uint64(0))
	var oldLog *os.File
	var gen uint64
	var snap []snapIndex
	if err == nil {
		gen = st.gen + 1
		var f *os.File
		f, err = os.OpenFile(st.logPath(gen), os.O_WRONLY|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o644)
		if err == nil {
			err = syncDir(st.dir)
		}
		if err == nil {
			st.mu.Lock()
			oldLog, st.log, st.gen, st.logSize = st.log, f, gen, 0
			st.mu.Unlock()
			snap, err = s.copyState()
		} else if f != nil {
			_ = f.Close()
		}
	}
	st.syncMu.Unlock()
	s.mu.RUnlock()
	if oldLog != nil {
		_ = oldLog.Close()
	}
	if err != nil {
		err = fmt.Errorf("esserver: compact: %w", err)
		st.fail(err)
		return err
	}
	size, err := writeSnapshot(st.dir, gen, snap)
	if err != nil {
		err = fmt.Errorf("esserver: snapshot: %w", err)
		st.fail(err)
		return err
	}
	st.mu.Lock()
	st.snapSize = size
	st.mu.Unlock()
	gens, _ := listLogs(st.dir)
	for _, g := range gens {
		if g < gen {
			_ = os.Remove(st.logPath(g))
		}
	}
	return nil
}

// copyState captures every index; the caller holds s.mu.
func (s *Server) copyState() ([]snapIndex, error) {
	names := make([]string, 0, len(s.indices))
	for n := range s.indices {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([]snapIndex, 0, len(names))
	for _, n := range names {
		ix := s.indices[n]
		meta, err := encodeMeta(ix)
		if err != nil {
			return nil, err
		}
		docs := make([]*docEntry, 0, len(ix.docs))
		for _, e := range ix.docs {
			docs = append(docs, e)
		}
		sort.Slice(docs, func(i, j int) bool { return docs[i].seqNo < docs[j].seqNo })
		out = append(out, snapIndex{name: n, meta: meta, docs: docs})
	}
	return out, nil
}

// writeSnapshot writes the snapshot of generation gen next to the real one,
// fsyncs it and renames it into place.
func writeSnapshot(dir string, gen uint64, snap []snapIndex) (int64, error) {
	tmp := filepath.Join(dir, snapshotName+".tmp")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return 0, err
	}
	defer func() { _ = f.Close() }()
	w := bufio.NewWriterSize(f, 1<<20)
	var frame []byte
	var size int64
	records := 0
	put := func(b []byte) error {
		size += int64(len(b))
		_, err := w.Write(b)
		return err
	}
	hdr, _ := json.Marshal(map[string]any{"format": persistFormat, "generation": gen})
	if err := put(appendFrame(frame[:0], append([]byte{recHeader}, hdr...))); err != nil {
		return 0, err
	}
	for _, ix := range snap {
		records++
		if err := put(appendFrame(frame[:0], ix.meta)); err != nil {
			return 0, err
		}
		for _, e := range ix.docs {
			records++
			frame = appendDocFrame(frame[:0], ix.name, e)
			if err := put(frame); err != nil {
				return 0, err
			}
		}
	}
	if err := put(appendFrame(frame[:0], append([]byte{recEnd}, strconv.Itoa(records)...))); err != nil {
		return 0, err
	}
	if err := w.Flush(); err != nil {
		return 0, err
	}
	if err := f.Sync(); err != nil {
		return 0, err
	}
	if err := f.Close(); err != nil {
		return 0, err
	}
	if err := os.Rename(tmp, filepath.Join(dir, snapshotName)); err != nil {
		return 0, err
	}
	return size, syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer func() { _ = d.Close() }()
	return d.Sync()
}

func (st *store) logPath(gen uint64) string {
	return filepath.Join(st.dir, fmt.Sprintf("%s%016d", logPrefix, gen))
}

// listLogs returns the generations of the log files in dir, ascending.
func listLogs(dir string) ([]uint64, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var gens []uint64
	for _, e := range ents {
		name := e.Name()
		if !strings.HasPrefix(name, logPrefix) {
			continue
		}
		g, err := strconv.ParseUint(strings.TrimPrefix(name, logPrefix), 10, 64)
		if err != nil {
			continue
		}
		gens = append(gens, g)
	}
	sort.Slice(gens, func(i, j int) bool { return gens[i] < gens[j] })
	return gens, nil
}

// --- metadata encoding --------------------------------------------------------

// persistedIndex is an index's metadata as a meta record holds it.
type persistedIndex struct {
	Name     string                    `json:"name"`
	UUID     string                    `json:"uuid"`
	Created  int64                     `json:"created_unix_nano"`
	Settings map[string]any            `json:"settings"`
	Mapping  *fieldMapping             `json:"mapping"`
	Aliases  map[string]persistedAlias `json:"aliases,omitempty"`
	SeqNo    int64                     `json:"seq_no"`
	Order    int64                     `json:"order"`
}

type persistedAlias struct {
	Filter        map[string]any `json:"filter,omitempty"`
	IndexRouting  string         `json:"index_routing,omitempty"`
	SearchRouting string         `json:"search_routing,omitempty"`
	IsWriteIndex  *bool          `json:"is_write_index,omitempty"`
	IsHidden      *bool          `json:"is_hidden,omitempty"`
}

func encodeMeta(ix *index) ([]byte, error) {
	p := persistedIndex{
		Name: ix.name, UUID: ix.uuid, Created: ix.created.UnixNano(),
		Settings: ix.settings.flat, Mapping: ix.mapping, SeqNo: ix.seqNo, Order: ix.order,
	}
	if len(ix.aliases) > 0 {
		p.Aliases = make(map[string]persistedAlias, len(ix.aliases))
		for n, a := range ix.aliases {
			p.Aliases[n] = persistedAlias{a.filter, a.indexRouting, a.searchRouting, a.isWriteIndex, a.isHidden}
		}
	}
	b, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("esserver: encode metadata of index [%s]: %w", ix.name, err)
	}
	return append([]byte{recMeta}, b...), nil
}

func decodeMeta(payload []byte) (*persistedIndex, error) {
	d := json.NewDecoder(bytes.NewReader(payload))
	d.UseNumber()
	var p persistedIndex
	if err := d.Decode(&p); err != nil {
		return nil, err
	}
	if p.Name == "" {
		return nil, errors.New("metadata without an index name")
	}
	if p.Mapping == nil {
		p.Mapping = &fieldMapping{Properties: map[string]*fieldMapping{}, Params: map[string]any{}}
	}
	if p.Mapping.Properties == nil {
		p.Mapping.Properties = map[string]*fieldMapping{}
	}
	if p.Mapping.Params == nil {
		p.Mapping.Params = map[string]any{}
	}
	if p.Settings == nil {
		p.Settings = map[string]any{}
	}
	return &p, nil
}

// --- replay ---------------------------------------------------------------------

// load replays the snapshot and the logs of st into s (before s serves).
func (s *Server) load(st *store) error {
	var gen uint64
	haveSnap := false
	snapPath := filepath.Join(st.dir, snapshotName)
	if data, err := os.ReadFile(snapPath); err == nil {
		g, err := s.replaySnapshot(snapPath, data)
		if err != nil {
			return err
		}
		gen, haveSnap = g, true
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("esserver: read snapshot: %w", err)
	}
	gens, err := listLogs(st.dir)
	if err != nil {
		return fmt.Errorf("esserver: list logs: %w", err)
	}
	var replay []uint64
	for _, g := range gens {
		if g >= gen || !haveSnap {
			replay = append(replay, g)
		}
	}
	for i, g := range replay {
		path := st.logPath(g)
		data, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("esserver: read log: %w", err)
		}
		n, torn, err := s.replayLog(path, data, i == len(replay)-1)
		if err != nil {
			return err
		}
		st.recovery.LogRecords += n
		st.recovery.TornBytes += torn
	}
	if len(replay) > 0 && replay[len(replay)-1] > gen {
		gen = replay[len(replay)-1]
	}
	st.gen = gen
	st.recovery.Indices = len(s.indices)
	for _, ix := range s.indices {
		for _, e := range ix.docs {
			if !e.deleted {
				st.recovery.Documents++
			}
		}
	}
	return nil
}

// nextFrame reads the frame at off; ok is false when the rest of data is
// not one whole frame with a valid checksum.
func nextFrame(data []byte, off int) (payload []byte, next int, why string) {
	if len(data)-off < frameHeader {
		return nil, off, "incomplete frame header"
	}
	n := binary.BigEndian.Uint32(data[off : off+4])
	sum := binary.BigEndian.Uint32(data[off+4 : off+8])
	if n == 0 || n > maxFrame {
		return nil, off, fmt.Sprintf("invalid frame length %d", n)
	}
	end := off + frameHeader + int(n)
	if end > len(data) || end < off {
		return nil, off, "incomplete frame"
	}
	payload = data[off+frameHeader : end]
	if crc32.Checksum(payload, crcTable) != sum {
		return nil, off, "checksum mismatch"
	}
	return payload, end, ""
}

func (s *Server) replaySnapshot(path string, data []byte) (uint64, error) {
	corrupt := func(off int, why string) error {
		return &CorruptError{File: path, Offset: int64(off), Reason: why}
	}
	payload, off, why := nextFrame(data, 0)
	if why != "" || payload[0] != recHeader {
		return 0, corrupt(0, "no header: "+why)
	}
	var hdr struct {
		Format     int    `json:"format"`
		Generation uint64 `json:"generation"`
	}
	if err := json.Unmarshal(payload[1:], &hdr); err != nil || hdr.Format != persistFormat {
		return 0, corrupt(0, fmt.Sprintf("unsupported header %q", payload[1:]))
	}
	records := 0
	for {
		at := off
		payload, off, why = nextFrame(data, off)
		if why != "" {
			return 0, corrupt(at, why+" (a snapshot is written whole before it is renamed into place; it cannot be torn)")
		}
		if payload[0] == recEnd {
			if want, err := strconv.Atoi(string(payload[1:])); err != nil || want != records {
				return 0, corrupt(at, fmt.Sprintf("end record says %q records, read %d", payload[1:], records))
			}
			if off != len(data) {
				return 0, corrupt(off, "data after the end record")
			}
			return hdr.Generation, nil
		}
		if err := s.applyRecord(payload); err != nil {
			return 0, corrupt(at, err.Error())
		}
		records++
	}
}

// replayLog applies the records of one log. In the newest log, the first
// bad frame ends the log: it is the tail of a write that was cut off before
// its fsync returned, so it was never acknowledged.
func (s *Server) replayLog(path string, data []byte, newest bool) (records int, torn int64, err error) {
	off := 0
	for off < len(data) {
		payload, next, why := nextFrame(data, off)
		if why != "" {
			if !newest {
				return records, 0, &CorruptError{File: path, Offset: int64(off), Reason: why + " (not the newest log, so not a torn write)"}
			}
			return records, int64(len(data) - off), nil
		}
		if err := s.applyRecord(payload); err != nil {
			return records, 0, &CorruptError{File: path, Offset: int64(off), Reason: err.Error()}
		}
		records++
		off = next
	}
	return records, 0, nil
}

// applyRecord applies one record to the state.
func (s *Server) applyRecord(p []byte) error {
	switch p[0] {
	case recMeta:
		pm, err := decodeMeta(p[1:])
		if err != nil {
			return fmt.Errorf("metadata record: %w", err)
		}
		st, eerr := buildSettings(pm.Settings)
		if eerr != nil {
			return fmt.Errorf("settings of index [%s]: %s", pm.Name, eerr.Reason)
		}
		aliases := make(map[string]*aliasMeta, len(pm.Aliases))
		for n, a := range pm.Aliases {
			aliases[n] = &aliasMeta{filter: a.Filter, indexRouting: a.IndexRouting, searchRouting: a.SearchRouting, isWriteIndex: a.IsWriteIndex, isHidden: a.IsHidden}
		}
		ix := s.indices[pm.Name]
		if ix == nil {
			ix = s.newIndex(pm.Name, pm.Settings, st, pm.Mapping)
			s.indices[pm.Name] = ix
		}
		ix.uuid, ix.created = pm.UUID, time.Unix(0, pm.Created)
		ix.settings, ix.mapping, ix.aliases = st, pm.Mapping, aliases
		ix.seqNo = max(ix.seqNo, pm.SeqNo)
		ix.order = max(ix.order, pm.Order)
	case recDrop:
		delete(s.indices, string(p[1:]))
	case recDoc:
		name, e, err := decodeDoc(p[1:])
		if err != nil {
			return err
		}
		ix := s.indices[name]
		if ix == nil {
			return fmt.Errorf("document [%s] of index [%s], which does not exist", e.id, name)
		}
		ix.docs[e.id] = e
		ix.makeVisible(e)
		ix.seqNo = max(ix.seqNo, e.seqNo)
		ix.order = max(ix.order, e.order)
	default:
		return fmt.Errorf("unknown record kind %q", p[0])
	}
	return nil
}

func decodeDoc(p []byte) (string, *docEntry, error) {
	r := bytes.NewReader(p)
	str := func() (string, error) {
		n, err := binary.ReadUvarint(r)
		if err != nil || n > uint64(r.Len()) {
			return "", errors.New("document record: bad string length")
		}
		b := make([]byte, n)
		_, _ = io.ReadFull(r, b)
		return string(b), nil
	}
	name, err := str()
	if err != nil {
		return "", nil, err
	}
	id, err := str()
	if err != nil {
		return "", nil, err
	}
	var nums [4]int64
	for i := range nums {
		if nums[i], err = binary.ReadVarint(r); err != nil {
			return "", nil, errors.New("document record: bad number")
		}
	}
	del, err := r.ReadByte()
	if err != nil {
		return "", nil, errors.New("document record: truncated")
	}
	e := &docEntry{id: id, version: nums[0], seqNo: nums[1], primaryTerm: nums[2], order: nums[3], deleted: del == 1}
	if !e.deleted {
		src := string(p[len(p)-r.Len():]) // the document's own copy, which m slices
		v, err := parseJSONString(src)
		if err != nil {
			return "", nil, fmt.Errorf("document [%s]: source: %w", id, err)
		}
		m, ok := v.(map[string]any)
		if !ok {
			return "", nil, fmt.Errorf("document [%s]: source is not an object", id)
		}
		e.source, e.parsed = src, m
	}
	return name, e, nil
}
