package sitefiles

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
)

// Page is one file of a page folder.
type Page struct {
	Name string // a plain file name: no '/', no leading '.' or '#', one line
	Body []byte
}

// manifestName is the file in a page folder that records the pages
// syncFolder wrote there: only those are ever removed. Hidden, like the
// temporary files, so that nobody takes it for a page.
const manifestName = ".gpumon-pages"

// maxManifest bounds what is read of a manifest: anyone who may write in the
// folder may write it. It holds some 20,000 names.
const maxManifest = 1 << 20

// parallelWrites is how many pages are written at once.
const parallelWrites = 8

// WritePages writes pages into dir, each as by Write, and records them as
// the folder's own (before they exist: a run killed halfway leaves no file
// of ours unrecorded). dir is created (0755) when missing; it is refused
// (an *Error, nothing written) when it is a link or not a folder. It
// removes nothing: PrunePages does, once whatever linked to the earlier
// pages is replaced.
//
// A page that cannot be written does not stop the others; the first error
// is returned, saying how many more failed.
func WritePages(dir string, pages []Page) error {
	if len(pages) == 0 {
		return nil
	}
	for _, p := range pages {
		if !plainName(p.Name) {
			return fmt.Errorf("sitefiles: page name %q is not a plain file name", p.Name)
		}
	}
	root, err := openFolder(dir, true)
	if err != nil {
		return err
	}
	defer root.Close()
	recorded, err := readManifest(root, dir)
	if err != nil {
		return err
	}
	if want := pageNames(pages); !isSubset(want, recorded) {
		if err := writeManifest(root, dir, union(recorded, want)); err != nil {
			return err
		}
	}
	var errs errorList
	for _, err := range writePages(root, dir, pages) {
		errs.add(err)
	}
	return errs.err()
}

// PrunePages removes the pages recorded in dir that are not among keep,
// each only if it is still a regular file: a file never recorded is never
// removed. With none kept, the record goes too, and dir if that left it
// empty. A dir that is missing, a link or not a folder holds nothing of
// ours (WritePages never writes through one): nothing is done.
func PrunePages(dir string, keep []Page) error {
	fi, err := os.Lstat(dir)
	if err != nil && os.IsNotExist(err) || err == nil && !fi.IsDir() {
		return nil
	}
	root, err := openFolder(dir, false)
	if err != nil || root == nil {
		return err
	}
	defer root.Close()
	recorded, err := readManifest(root, dir)
	if err != nil {
		return err
	}
	want := pageNames(keep)
	var errs errorList
	left := removeStale(root, dir, recorded, want, &errs)
	final := union(intersect(want, recorded), left)
	if !slices.Equal(final, recorded) {
		errs.add(writeManifest(root, dir, final))
	}
	return errs.err()
}

func intersect(a, b []string) []string {
	var out []string
	for _, x := range a {
		if slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}

// writePages writes each page as Write does, several at once: each waits
// for its fsync, and the file system commits those that wait together in
// one go. The errors are in the order of pages.
func writePages(root *os.Root, dir string, pages []Page) []error {
	errs := make([]error, len(pages))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(len(pages), parallelWrites) {
		wg.Go(func() {
			for i := range next {
				p := pages[i]
				errs[i] = writeIn(root, filepath.Join(dir, p.Name), p.Name, func(w io.Writer) error {
					_, err := w.Write(p.Body)
					return err
				})
			}
		})
	}
	for i := range pages {
		next <- i
	}
	close(next)
	wg.Wait()
	return errs
}

// openFolder opens dir, a real folder, creating it when create is set and
// it is missing. A missing dir not to be created is nil, nil.
func openFolder(dir string, create bool) (*os.Root, error) {
	made := false
	if create {
		err := os.Mkdir(dir, 0o755)
		if err != nil && !os.IsExist(err) {
			return nil, fileError("make folder", dir, err)
		}
		made = err == nil
	}
	fi, err := os.Lstat(dir)
	if os.IsNotExist(err) && !create {
		return nil, nil
	}
	if err != nil {
		return nil, fileError("use folder", dir, err)
	}
	if err := realFolder(dir, fi); err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fileError("use folder", dir, err)
	}
	// dir may have been swapped for a link between the Lstat and the open;
	// from here on, root is the folder that was checked whatever dir becomes
	if rfi, err := root.Stat("."); err != nil || !os.SameFile(fi, rfi) {
		root.Close()
		return nil, &Error{Op: "write pages into", Path: dir, Err: syscall.ENOTDIR, why: "it changed while it was opened"}
	}
	if made { // 0755 whatever the umask: nginx reads it
		root.Chmod(".", 0o755)
	}
	return root, nil
}

// realFolder refuses dir, described by fi (from Lstat), unless it is a
// folder itself, not a link to one.
func realFolder(dir string, fi fs.FileInfo) error {
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		target, _ := os.Readlink(dir)
		return &Error{Op: "write pages into", Path: dir, Err: syscall.ENOTDIR,
			why:  "it is a link to " + target,
			hint: fmt.Sprintf("pages are written only into a real folder, never through a link: remove the link (rm %s); the next run makes the folder", dir)}
	case !fi.IsDir():
		return &Error{Op: "write pages into", Path: dir, Err: syscall.ENOTDIR,
			why:  fmt.Sprintf("it is %s, not a folder", kindOf(fi)),
			hint: fmt.Sprintf("move it away (mv %s %[1]s.old); the next run makes the folder", dir)}
	}
	return nil
}

func kindOf(fi fs.FileInfo) string {
	switch fi.Mode().Type() {
	case 0:
		return "a regular file"
	case fs.ModeNamedPipe:
		return "a named pipe"
	case fs.ModeSocket:
		return "a socket"
	case fs.ModeDevice, fs.ModeDevice | fs.ModeCharDevice:
		return "a device"
	}
	return "not a regular file"
}

// removeStale removes the recorded files not wanted now, each only if it
// is still a regular file, and returns those that stay recorded: the ones
// that could not be removed.
func removeStale(root *os.Root, dir string, recorded, want []string, errs *errorList) (left []string) {
	for _, name := range recorded {
		if slices.Contains(want, name) {
			continue
		}
		// a link or a folder that took the name is not ours: it is left
		// alone, and no longer recorded
		fi, err := root.Lstat(name)
		if os.IsNotExist(err) || err == nil && !fi.Mode().IsRegular() {
			continue
		}
		if err == nil {
			err = root.Remove(name)
		}
		if err != nil && !os.IsNotExist(err) {
			errs.add(fileError("remove", filepath.Join(dir, name), err))
			left = append(left, name)
		}
	}
	return left
}

// readManifest is the sorted names the manifest in root records, the
// malformed ones (a '/', a leading '.') left out. A manifest that is not a
// regular file records nothing.
func readManifest(root *os.Root, dir string) ([]string, error) {
	path := filepath.Join(dir, manifestName)
	fi, err := root.Lstat(manifestName)
	if os.IsNotExist(err) || err == nil && !fi.Mode().IsRegular() {
		return nil, nil
	}
	if err != nil {
		return nil, fileError("read", path, err)
	}
	// not blocking, not through a link: a named pipe or a link swapped in
	// since the Lstat must not stall or redirect the run
	f, err := root.OpenFile(manifestName, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, nil
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, nil
	}
	data, err := io.ReadAll(io.LimitReader(f, maxManifest))
	if err != nil {
		return nil, fileError("read", path, err)
	}
	if len(data) == maxManifest { // a name cut at the limit is no name
		data = data[:bytes.LastIndexByte(data, '\n')+1]
	}
	var names []string
	for line := range strings.Lines(string(data)) {
		if name := strings.TrimSuffix(line, "\n"); plainName(name) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}

// writeManifest records names (sorted) as the folder's own files, or
// removes the manifest, and the folder if it is left empty, when there are
// none.
func writeManifest(root *os.Root, dir string, names []string) error {
	path := filepath.Join(dir, manifestName)
	if len(names) == 0 {
		if err := root.Remove(manifestName); err != nil && !os.IsNotExist(err) {
			return fileError("remove", path, err)
		}
		syscall.Rmdir(dir) // fails unless empty, or when dir became a link
		return nil
	}
	return writeIn(root, path, manifestName, func(w io.Writer) error {
		bw := bufio.NewWriter(w)
		bw.WriteString("# the files gpumon wrote in this folder: it removes only these when they are no longer needed\n")
		for _, n := range names {
			bw.WriteString(n + "\n")
		}
		return bw.Flush()
	})
}

// plainName reports whether name is a file name of a page folder's own:
// no folder part, not hidden (the manifest, the temporary files, "." and
// ".."), one line, not a comment of the manifest.
func plainName(name string) bool {
	return name != "" && len(name) <= 255 && name[0] != '.' && name[0] != '#' && !strings.ContainsAny(name, "/\x00\n\r")
}

func pageNames(pages []Page) []string {
	names := make([]string, len(pages))
	for i, p := range pages {
		names[i] = p.Name
	}
	slices.Sort(names)
	return slices.Compact(names)
}

func isSubset(a, b []string) bool {
	for _, s := range a {
		if _, ok := slices.BinarySearch(b, s); !ok {
			return false
		}
	}
	return true
}

// union is the sorted names in a or b.
func union(a, b []string) []string {
	u := slices.Concat(a, b)
	slices.Sort(u)
	return slices.Compact(u)
}

// errorList keeps the first error of several and how many came after it.
type errorList struct {
	first error
	more  int
}

func (l *errorList) add(err error) {
	switch {
	case err == nil:
	case l.first == nil:
		l.first = err
	default:
		l.more++
	}
}

func (l *errorList) err() error {
	if e, ok := l.first.(*Error); ok && l.more > 0 {
		e.why += fmt.Sprintf(" (and %d more files failed)", l.more)
	}
	return l.first
}
