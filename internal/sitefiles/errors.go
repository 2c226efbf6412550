package sitefiles

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"unsafe"
)

// Error is a file of the site that could not be written or removed, or a
// folder of pages that was refused. Its Error is one line naming the file
// and the cause; its Hint, the fix where one is known (cli.Exit prints it).
type Error struct {
	Op   string // what was tried: "write", "remove", "read", "make folder", "use folder", "write pages into"
	Path string // the file, or the refused folder
	Err  error  // the cause, for errors.Is: fs.ErrNotExist, syscall.ENOSPC, ...
	why  string // the cause in words
	hint string
}

func (e *Error) Error() string { return "cannot " + e.Op + " " + e.Path + ": " + e.why }
func (e *Error) Unwrap() error { return e.Err }

// Hint is the fix, "" where none is known.
func (e *Error) Hint() string { return e.hint }

// fileError is err, met while op ("write" or "remove") worked on path, in
// words a site admin acts on.
func fileError(op, path string, err error) *Error {
	dir := filepath.Dir(path)
	e := &Error{Op: op, Path: path, Err: err, why: plainCause(err)}
	var errno syscall.Errno
	errors.As(err, &errno)
	switch {
	case errors.Is(err, fs.ErrNotExist) && !isFolder(dir):
		e.why = fmt.Sprintf("folder %s does not exist", dir)
		e.hint = fmt.Sprintf("create it (sudo install -d -o %s %s) or change the path", userName(), dir)
	case errno == syscall.EPERM && immutable(path, dir):
		// chattr +i: no mode or owner lets anyone, root included, change it
		e.why = fmt.Sprintf("%s is immutable or append-only (lsattr -d %[1]s)", immutableOne(path, dir))
		e.hint = fmt.Sprintf("if that is not meant, sudo chattr -i -a %s", immutableOne(path, dir))
	case errno == syscall.EACCES || errno == syscall.EPERM:
		e.why, e.hint = permissionDenied(op, path)
	case errno == syscall.ENOSPC:
		e.why = fmt.Sprintf("the file system of %s is full%s", dir, kept(op, path))
		e.hint = fmt.Sprintf("free some space on it (df -h %s)", dir)
	case errno == syscall.EDQUOT:
		e.why = fmt.Sprintf("the disk quota of user %s on the file system of %s is full%s", userName(), dir, kept(op, path))
		e.hint = fmt.Sprintf("free some of %s's files there or raise its quota (quota -s %[1]s)", userName())
	case errno == syscall.EROFS:
		e.why = fmt.Sprintf("the file system of %s is read-only%s", dir, kept(op, path))
		e.hint = "remount it read-write, or change the path to a writable folder"
	case errno == syscall.EISDIR || errno == syscall.EEXIST && isFolder(path): // os.Rename says EEXIST
		e.why = "a folder of that name is in the way"
		e.hint = fmt.Sprintf("move it away (mv %s %[1]s.old)", path)
	case errno == syscall.ENOTDIR:
		e.why = fmt.Sprintf("%s is not a folder", dir)
	}
	return e
}

// plainCause is err, an error of os, without the temporary file's name
// that os puts in it.
func plainCause(err error) string {
	switch e := err.(type) {
	case *fs.PathError:
		return e.Err.Error()
	case *os.LinkError:
		return e.Err.Error()
	}
	return err.Error()
}

// kept says what became of the old file when writing path failed.
func kept(op, path string) string {
	if op != "write" {
		return ""
	}
	if _, err := os.Lstat(path); err != nil {
		return "; nothing was written"
	}
	return "; the previous file was kept"
}

func isFolder(dir string) bool {
	fi, err := os.Stat(dir)
	return err == nil && fi.IsDir()
}

// permissionDenied is the cause and the fix of EACCES/EPERM on path: who
// may not change files in which folder, and how to let it.
func permissionDenied(op, path string) (why, hint string) {
	dir := filepath.Dir(path)
	me := userName()
	verb := map[string]string{"remove": "remove files in", "make folder": "create folders in", "read": "read files in", "use folder": "enter"}[op]
	if verb == "" {
		verb = "create files in"
	}
	why = fmt.Sprintf("user %s may not %s %s", me, verb, dir)
	owner, group, mode, ok := folderOwner(dir)
	if !ok {
		return why, fmt.Sprintf("let %s reach and write %s, or change the path to a folder it owns", me, dir)
	}
	why += fmt.Sprintf(" (owner %s, group %s, mode %04o)", owner, group, mode)
	fix := fmt.Sprintf("let a group %s is in write there (sudo chgrp %s %s && sudo chmod g+w %[3]s)", me, primaryGroup(), dir)
	if slices.Contains(myGroups(), group) {
		fix = fmt.Sprintf("let its group %s write there (sudo chmod g+w %s)", group, dir)
	}
	if strings.HasSuffix(path, ".prom") {
		own := filepath.Join("/var/lib", me, "textfile")
		return why, fmt.Sprintf("%s, or give %s a folder of its own (sudo install -d -o %[2]s %s), write the file there "+
			"and point node_exporter's --collector.textfile.directory at it (1.9 and later take several)", fix, me, own)
	}
	return why, fmt.Sprintf("%s, or change the path to a folder %s owns", fix, me)
}

// folderOwner is dir's owner and group names and its permission bits.
func folderOwner(dir string) (owner, group string, mode uint32, ok bool) {
	fi, err := os.Stat(dir)
	if err != nil {
		return "", "", 0, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return "", "", 0, false
	}
	owner = strconv.Itoa(int(st.Uid))
	if u, err := user.LookupId(owner); err == nil {
		owner = u.Username
	}
	group = strconv.Itoa(int(st.Gid))
	if g, err := user.LookupGroupId(group); err == nil {
		group = g.Name
	}
	return owner, group, st.Mode & 0o7777, true
}

// userName is the running user's name, or its uid where it has none.
func userName() string {
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	return strconv.Itoa(os.Geteuid())
}

// primaryGroup is the name of the running user's own group.
func primaryGroup() string {
	gid := strconv.Itoa(os.Getegid())
	if g, err := user.LookupGroupId(gid); err == nil {
		return g.Name
	}
	return gid
}

// myGroups is the names of the groups the running user is in.
func myGroups() []string {
	gids, err := os.Getgroups()
	if err != nil {
		return nil
	}
	names := []string{primaryGroup()}
	for _, gid := range gids {
		if g, err := user.LookupGroupId(strconv.Itoa(gid)); err == nil {
			names = append(names, g.Name)
		}
	}
	return names
}

// immutable reports whether path or its folder carries the immutable or
// append-only attribute, the EPERM that no permission explains.
func immutable(path, dir string) bool { return immutableOne(path, dir) != "" }

// immutableOne is whichever of path and dir is immutable or append-only,
// or "".
func immutableOne(path, dir string) string {
	for _, p := range []string{path, dir} {
		if attrs, ok := fileAttrs(p); ok && attrs&(fsImmutable|fsAppend) != 0 {
			return p
		}
	}
	return ""
}

// The inode flags of FS_IOC_GETFLAGS (linux/fs.h) that lsattr shows as i
// and a.
const (
	fsImmutable   = 0x10
	fsAppend      = 0x20
	fsIocGetflags = 0x80086601
)

func fileAttrs(path string) (uint32, bool) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	var attrs uint32
	_, _, errno := syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), fsIocGetflags, uintptr(unsafe.Pointer(&attrs)))
	return attrs, errno == 0
}
