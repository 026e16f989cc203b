package driver

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Kept output is bounded: each stream of each rank keeps its current file
// (stdout.log) and at most maxFiles-1 rotated ones (stdout.log.1, the
// newest, … stdout.log.N), each at most maxBytes; the oldest is dropped.
// The rank writes into a pipe and the supervisor moves the bytes into the
// files with splice(2), in the kernel: see the package doc for why.
//
// A rotation renames the files under an exclusive flock(2) of the task
// directory; readers (OpenLog, LogReader.Next) list and open them under a
// shared one, so they never see a rotation half done.

// The node's bounds, for ranks whose job sets none (kubelet's defaults).
const (
	DefaultLogFileBytes = 10 << 20
	DefaultLogFiles     = 5
)

// pumpChunk is the most one splice moves, and pumpBudget the most one
// stream moves per wake-up, so that one flooding rank does not starve the
// others' copies.
const (
	pumpChunk  = 1 << 20
	pumpBudget = 4 << 20
)

// logStream copies one stream of one rank from its pipe into rotating
// files. The copier's goroutine pumps it when the pipe is readable, and the
// reaper once more when the rank has exited, so that an exit reported
// means its output is on disk.
type logStream struct {
	key      int32  // the pipe's read end as the copier knows it
	path     string // the current file; rotated ones add ".1", ".2", …
	maxBytes int64
	maxFiles int
	sink     int       // write-only /dev/null: output that cannot be written
	log      io.Writer // the supervisor's log
	owner    *Account  // owns the files it creates; nil: the supervisor

	mu       sync.Mutex // guards everything below
	epfd     int        // the copier's epoll set the pipe is in; -1 if none
	pipe     int        // the read end, non-blocking; -1 once closed
	file     int        // the current file; -1 when not open
	size     int64      // bytes in the current file
	times    int        // the current file's time index (logtimes.go); -1 when none
	markedAt time.Time  // when the index's last record was written; zero: none yet in this file
	dropping bool       // writing failed (a full disk): the next chunk goes to sink
	failing  bool       // the last write failed: said in the log once
}

// newLogStream makes the pipe a rank writes path's stream into and opens
// (creating) the current file. It returns the pipe's write end for the
// rank, which the caller closes once the rank is started.
func newLogStream(path string, maxBytes int64, maxFiles int, owner *Account, sink int, log io.Writer) (*logStream, int, error) {
	ls, err := openLogStream(path, maxBytes, maxFiles, owner, sink, log)
	if err != nil {
		return nil, -1, err
	}
	var p [2]int
	// Close-on-exec on both ends: ForkExec dups the write end onto the
	// rank's fd 1 or 2 (clearing the flag there) and no other child
	// inherits either. Only the read end is non-blocking: the rank's
	// writes block when the pipe is full, as under any container runtime.
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		ls.closeLocked()
		return nil, -1, fmt.Errorf("pipe for %s: %w", path, err)
	}
	ls.pipe, ls.key = p[0], int32(p[0])
	if err := unix.SetNonblock(p[0], true); err != nil {
		unix.Close(p[1])
		ls.closeLocked()
		return nil, -1, fmt.Errorf("pipe for %s: %w", path, err)
	}
	return ls, p[1], nil
}

// adoptLogStream takes over the copying of a live rank's stream fd (1 or
// 2) that an earlier supervisor started, when that fd is still the pipe
// with inode ino: /proc gives a new read end of it.
func adoptLogStream(pid, fd int, ino uint64, path string, maxBytes int64, maxFiles int, owner *Account, sink int, log io.Writer) (*logStream, error) {
	r, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/fd/"+strconv.Itoa(fd), unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("adopt fd %d of %d: %w", fd, pid, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(r, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFIFO || st.Ino != ino {
		unix.Close(r)
		return nil, fmt.Errorf("adopt fd %d of %d: no longer the pipe the rank was started with", fd, pid)
	}
	ls, err := openLogStream(path, maxBytes, maxFiles, owner, sink, log)
	if err != nil {
		unix.Close(r)
		return nil, err
	}
	ls.pipe, ls.key = r, int32(r)
	return ls, nil
}

// openLogStream is a stream of path, its current file open, without a pipe.
func openLogStream(path string, maxBytes int64, maxFiles int, owner *Account, sink int, log io.Writer) (*logStream, error) {
	if maxBytes <= 0 {
		maxBytes = DefaultLogFileBytes
	}
	if maxFiles <= 0 {
		maxFiles = DefaultLogFiles
	}
	ls := &logStream{path: path, maxBytes: maxBytes, maxFiles: maxFiles, owner: owner, sink: sink, log: log, epfd: -1, pipe: -1, file: -1, times: -1}
	if err := ls.open(false); err != nil {
		return nil, err
	}
	return ls, nil
}

// pipeInode is the inode of the stream's pipe, which names it in /proc.
func (ls *logStream) pipeInode() uint64 {
	var st unix.Stat_t
	if unix.Fstat(ls.pipe, &st) != nil {
		return 0
	}
	return st.Ino
}

// open opens the current file, appending to what it holds, or, with
// fresh, empty; and its time index, which is left out (no times kept for
// this file) if it cannot be opened.
func (ls *logStream) open(fresh bool) error {
	fd, err := ls.openPath(ls.path, fresh)
	if err != nil {
		return err
	}
	if err := ls.opened(fd); err != nil {
		return err
	}
	ls.markedAt = time.Time{}
	if tfd, err := ls.openPath(timesName(ls.path), fresh); err == nil {
		if _, err := unix.Seek(tfd, 0, io.SeekEnd); err == nil {
			ls.times = tfd
		} else {
			unix.Close(tfd)
		}
	}
	return nil
}

// openPath opens path for writing at its start (the caller seeks), made
// if need be, emptied with fresh.
func (ls *logStream) openPath(path string, fresh bool) (int, error) {
	if ls.owner != nil {
		return ls.openOwned(path, fresh)
	}
	flags := unix.O_WRONLY | unix.O_CREAT | unix.O_CLOEXEC
	if fresh {
		flags |= unix.O_TRUNC
	}
	// Not O_APPEND: splice refuses files opened for appending, and the
	// supervisor is the only writer.
	fd, err := unix.Open(path, flags, 0o644)
	if err != nil {
		return -1, fmt.Errorf("open %s: %w", path, err)
	}
	return fd, nil
}

// openOwned is open for a rank with an account of its own, whose task
// directory is that user's: the user can put anything where the file goes
// while the rank runs (a rotation opens a new file), a symlink (root would
// write, or chown, through it) or a FIFO (the open would block the copier,
// and every rank's output with it). So the last element is never
// followed, the open never blocks, and only a regular file is written: a
// new one (fresh: in place of whatever has the name) made the owner's,
// mode 0600, or an existing one already the owner's.
func (ls *logStream) openOwned(path string, fresh bool) (int, error) {
	flags := unix.O_WRONLY | unix.O_CLOEXEC | unix.O_NOFOLLOW | unix.O_NONBLOCK
	if fresh {
		_ = unix.Unlink(path) // never follows a symlink: removes it
	}
	created := true
	fd, err := unix.Open(path, flags|unix.O_CREAT|unix.O_EXCL, 0o600)
	if errors.Is(err, unix.EEXIST) && !fresh {
		created = false
		fd, err = unix.Open(path, flags, 0)
	}
	if err != nil {
		return -1, fmt.Errorf("open %s: %w", path, err)
	}
	var st unix.Stat_t
	err = unix.Fstat(fd, &st)
	switch {
	case err != nil:
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		err = errNotRegular
	case created:
		err = unix.Fchown(fd, ls.owner.UID, ls.owner.GID)
	case int(st.Uid) != ls.owner.UID:
		err = fmt.Errorf("owned by uid %d, not the rank's uid %d", st.Uid, ls.owner.UID)
	}
	if err == nil {
		err = unix.SetNonblock(fd, false)
	}
	if err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("open %s: %w", path, err)
	}
	return fd, nil
}

// opened makes fd the current file, at its end.
func (ls *logStream) opened(fd int) error {
	end, err := unix.Seek(fd, 0, io.SeekEnd)
	if err != nil {
		unix.Close(fd)
		return fmt.Errorf("open %s: %w", ls.path, err)
	}
	ls.file, ls.size = fd, end
	return nil
}

// pump moves what the pipe holds, up to budget bytes, into the files. It
// reports whether the pipe has reached its end (every writer closed it):
// the stream is then closed.
func (ls *logStream) pump(budget int64) (eof bool) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	for ls.pipe >= 0 && budget > 0 {
		if ls.file < 0 {
			_ = ls.open(false) // a rotation failed: try again (it rotates anew when full)
		}
		if ls.file >= 0 && ls.size >= ls.maxBytes {
			ls.rotateLocked()
		}
		n := min(budget, pumpChunk)
		var moved int64
		var err error
		if ls.file >= 0 && !ls.dropping {
			n = min(n, ls.maxBytes-ls.size)
			moved, err = unix.Splice(ls.pipe, nil, ls.file, nil, int(n), unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
			if err == nil {
				ls.markLocked(ls.size, moved)
				ls.size += moved
				ls.failing = false
			} else if !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EINTR) {
				// The disk is full, or the file system refuses: the rank
				// must not block on it, so this chunk is dropped and the
				// next one tries the file again. Said once per streak.
				if !ls.failing {
					fmt.Fprintf(ls.log, "%s %s: %v; dropping output until writes succeed\n", time.Now().Format(time.RFC3339), ls.path, err)
				}
				ls.dropping, ls.failing = true, true
				continue
			}
		} else {
			moved, err = unix.Splice(ls.pipe, nil, ls.sink, nil, int(n), unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
			ls.dropping = false // try the file with the next chunk
			if err != nil && !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EINTR) {
				ls.closeLocked() // the pipe itself is broken
				return true
			}
		}
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.EAGAIN):
			return false // drained for now
		case moved == 0:
			ls.closeLocked()
			return true
		}
		budget -= moved
	}
	return ls.pipe < 0
}

// rotateLocked closes the full current file, shifts the rotated ones up
// by one (dropping the oldest) and opens a new, empty current file.
func (ls *logStream) rotateLocked() {
	unix.Close(ls.file)
	ls.file = -1
	ls.closeTimesLocked()
	unlock, err := lockDir(filepath.Dir(ls.path), unix.LOCK_EX)
	if err != nil {
		fmt.Fprintf(ls.log, "%s rotate %s: %v\n", time.Now().Format(time.RFC3339), ls.path, err)
		return // output is dropped until the next try
	}
	defer unlock()
	if ls.maxFiles == 1 {
		_ = os.Remove(ls.path)
		_ = os.Remove(timesName(ls.path))
	} else {
		for _, name := range []func(string) string{func(p string) string { return p }, timesName} {
			_ = os.Remove(name(rotatedName(ls.path, ls.maxFiles-1)))
			for k := ls.maxFiles - 2; k >= 1; k-- {
				_ = os.Rename(name(rotatedName(ls.path, k)), name(rotatedName(ls.path, k+1)))
			}
			_ = os.Rename(name(ls.path), name(rotatedName(ls.path, 1)))
		}
	}
	if err := ls.open(true); err != nil {
		fmt.Fprintf(ls.log, "%s rotate %s: %v\n", time.Now().Format(time.RFC3339), ls.path, err)
	}
}

// close closes the pipe and the file.
func (ls *logStream) close() {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ls.closeLocked()
}

func (ls *logStream) closeLocked() {
	if ls.pipe >= 0 {
		// Out of the epoll set first: the rank holds the same pipe as fd
		// 3 or 4, so closing ours alone would leave it there, and a pipe
		// whose writer closed (exec >file) reports a hang-up on every
		// wait: the copier would spin for the rank's whole life.
		if ls.epfd >= 0 {
			unix.EpollCtl(ls.epfd, unix.EPOLL_CTL_DEL, ls.pipe, nil)
			ls.epfd = -1
		}
		unix.Close(ls.pipe)
		ls.pipe = -1
	}
	if ls.file >= 0 {
		unix.Close(ls.file)
		ls.file = -1
	}
	ls.closeTimesLocked()
}

func rotatedName(path string, k int) string { return path + "." + strconv.Itoa(k) }

// lockDir takes flock(how) on dir and returns its release.
func lockDir(dir string, how int) (func(), error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	for {
		err = unix.Flock(fd, how)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	return func() { unix.Close(fd) }, nil // closing releases the lock
}

// copier is the supervisor's one goroutine that copies every rank's kept
// output: an epoll set of the pipes' read ends, so that a rank costs no
// goroutine of its own. serve runs run in a goroutine, and after stop
// waits for it.
type copier struct {
	epfd int
	wake int // an eventfd in the set: stop writes it

	mu      sync.Mutex // guards streams
	streams map[int32]*logStream
}

func newCopier() (*copier, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("epoll: %w", err)
	}
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(epfd)
		return nil, fmt.Errorf("eventfd: %w", err)
	}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, wake, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(wake)}); err != nil {
		unix.Close(epfd)
		unix.Close(wake)
		return nil, fmt.Errorf("epoll: %w", err)
	}
	return &copier{epfd: epfd, wake: wake, streams: map[int32]*logStream{}}, nil
}

// add starts copying ls.
func (c *copier) add(ls *logStream) error {
	fd := ls.key
	c.mu.Lock()
	c.streams[fd] = ls
	c.mu.Unlock()
	if err := unix.EpollCtl(c.epfd, unix.EPOLL_CTL_ADD, int(fd), &unix.EpollEvent{Events: unix.EPOLLIN, Fd: fd}); err != nil {
		c.mu.Lock()
		delete(c.streams, fd)
		c.mu.Unlock()
		return fmt.Errorf("epoll: %w", err)
	}
	ls.mu.Lock()
	ls.epfd = c.epfd
	ls.mu.Unlock()
	return nil
}

// run copies until stop; it returns after closing every stream.
func (c *copier) run() {
	evs := make([]unix.EpollEvent, 64)
	for {
		n, err := unix.EpollWait(c.epfd, evs, -1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			break
		}
		stop := false
		for _, ev := range evs[:n] {
			if int(ev.Fd) == c.wake {
				stop = true
				continue
			}
			c.mu.Lock()
			ls := c.streams[ev.Fd]
			c.mu.Unlock()
			if ls != nil && ls.pump(pumpBudget) {
				c.drop(ls)
			}
		}
		if stop {
			break
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for fd, ls := range c.streams {
		ls.close()
		delete(c.streams, fd)
	}
	unix.Close(c.epfd)
	unix.Close(c.wake)
}

// drop forgets a stream whose pipe has closed (closing the fd removed it
// from the epoll set), unless a new stream already has its fd.
func (c *copier) drop(ls *logStream) {
	c.mu.Lock()
	if c.streams[ls.key] == ls {
		delete(c.streams, ls.key)
	}
	c.mu.Unlock()
}

// stop makes run return.
func (c *copier) stop() {
	var one = [8]byte{1}
	_, _ = unix.Write(c.wake, one[:])
}

// ---- reading ----

// LogReader reads one stream of a task's retained log in order: the
// rotated files oldest first, then the current one. Next follows it
// across rotations. It is not safe for concurrent use.
type LogReader struct {
	path  string       // the current file's name
	files []*os.File   // to read, in order; the last is the newest opened
	inos  []uint64     // their inodes
	times []*timeIndex // their time indexes (logtimes.go)
	offs  []int64      // how far each has been read
}

// OpenLog opens what dir retains of stream ("stdout" or "stderr"). It
// fails with an error wrapping os.ErrNotExist when there is none (output
// discarded, or the rank never started).
func OpenLog(dir, stream string) (*LogReader, error) {
	r := &LogReader{path: filepath.Join(dir, stream+".log")}
	ok, err := r.openAfter(0)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("%s: %w", r.path, os.ErrNotExist)
	}
	return r, nil
}

// Read reads on through the files; io.EOF means the end of the newest
// file opened so far.
func (r *LogReader) Read(p []byte) (int, error) {
	n, _, err := r.ReadTimed(p)
	return n, err
}

// ReadTimed is Read, and says when what it read was written: at(i) is
// the time of p[i] (see logtimes.go for how close that is).
func (r *LogReader) ReadTimed(p []byte) (n int, at func(i int) time.Time, err error) {
	for len(r.files) > 0 {
		n, err := r.files[0].Read(p)
		if n > 0 || (err != nil && err != io.EOF) {
			ti, off := r.times[0], r.offs[0]
			r.offs[0] += int64(n)
			return n, func(i int) time.Time { return ti.at(off + int64(i)) }, err
		}
		if len(r.files) == 1 {
			return 0, nil, io.EOF
		}
		// A file with a successor is complete: the copier renames it only
		// after its last write.
		r.files[0].Close()
		r.times[0].close()
		r.files, r.inos, r.times, r.offs = r.files[1:], r.inos[1:], r.times[1:], r.offs[1:]
	}
	return 0, nil, io.EOF
}

// Next opens the files written since the newest one opened (after a
// rotation) and reports whether there were any; Read then returns the
// rest of that one and goes on into them. Files dropped meanwhile are
// skipped: the follower goes on with the oldest retained.
func (r *LogReader) Next() (bool, error) {
	if len(r.inos) == 0 {
		return r.openAfter(0)
	}
	return r.openAfter(r.inos[len(r.inos)-1])
}

// Close closes the open files.
func (r *LogReader) Close() error {
	for i, f := range r.files {
		f.Close()
		r.times[i].close()
	}
	r.files, r.inos, r.times, r.offs = nil, nil, nil, nil
	return nil
}

// openAfter, under a shared lock of the directory, opens the files newer
// than the one with inode after (0: all of them), oldest first.
func (r *LogReader) openAfter(after uint64) (bool, error) {
	unlock, err := lockDir(filepath.Dir(r.path), unix.LOCK_SH)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return false, nil
		}
		return false, err
	}
	defer unlock()
	names := r.retained()
	start := 0
	if after != 0 {
		for i, name := range names {
			var st unix.Stat_t
			if unix.Lstat(name, &st) == nil && st.Ino == after {
				start = i + 1
				break
			}
		}
	}
	opened := false
	for _, name := range names[start:] {
		f, err := OpenRegular(name)
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, errNotRegular) {
			continue // not one the copier wrote: the rank's user put it there
		}
		if err != nil {
			return opened, err
		}
		var st unix.Stat_t
		if err := unix.Fstat(int(f.Fd()), &st); err != nil {
			f.Close()
			return opened, err
		}
		r.files, r.inos = append(r.files, f), append(r.inos, st.Ino)
		// Its index, opened under the same lock: the pair is one file's.
		r.times, r.offs = append(r.times, openTimeIndex(f, timesName(name))), append(r.offs, 0)
		opened = true
	}
	return opened, nil
}

// retained lists the stream's files, oldest first.
func (r *LogReader) retained() []string {
	ents, _ := os.ReadDir(filepath.Dir(r.path))
	base := filepath.Base(r.path) + "."
	var ks []int
	for _, e := range ents {
		if suffix, ok := strings.CutPrefix(e.Name(), base); ok {
			if k, err := strconv.Atoi(suffix); err == nil && k > 0 {
				ks = append(ks, k)
			}
		}
	}
	sort.Sort(sort.Reverse(sort.IntSlice(ks)))
	out := make([]string, 0, len(ks)+1)
	for _, k := range ks {
		out = append(out, rotatedName(r.path, k))
	}
	return append(out, r.path)
}

// errNotRegular: OpenRegular found something other than a regular file.
var errNotRegular = errors.New("not a regular file")

// OpenRegular opens path for reading when it is a regular file. Under a
// directory the rank's user owns, that user may have put a symlink there
// (root would read through it, and show another user's file as the rank's
// log) or a FIFO (the open would block): it follows no symlink in the
// last element, does not block, and refuses anything but a regular file
// (a symlink among them) with an error wrapping errNotRegular.
func OpenRegular(path string) (*os.File, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			err = errNotRegular // a symlink
		}
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, &os.PathError{Op: "open", Path: path, Err: errNotRegular}
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}
