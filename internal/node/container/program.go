package container

import (
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
)

// ProgramFiles are the files an image needs to run the program at path as
// /as: the program, and, when it is dynamically linked (a gangway built
// with cgo, a test binary built with -race), its ELF interpreter and the
// shared libraries it needs, transitively, at the paths the host has them
// under (where the interpreter looks for them by default). A static
// program needs itself alone.
func ProgramFiles(path, as string) ([]File, error) {
	body, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("image of program %s: %w", path, err)
	}
	files := []File{{Name: strings.TrimPrefix(as, "/"), Mode: 0o755, Body: body}}
	libs, err := sharedLibraries(path)
	if err != nil {
		return nil, fmt.Errorf("image of program %s: %w", path, err)
	}
	for _, l := range libs {
		b, err := os.ReadFile(l) // through symbolic links: the image holds regular files
		if err != nil {
			return nil, fmt.Errorf("image of program %s: %w", path, err)
		}
		files = append(files, File{Name: strings.TrimPrefix(l, "/"), Mode: 0o755, Body: b})
	}
	return files, nil
}

// ProgramImage makes, in the node's engine, an image that runs the program
// at path as /as (ProgramFiles): nothing is pulled. It is named repo:TAG,
// TAG the start of the program's SHA-256, so an unchanged program makes it
// once; made reports whether this call made it.
func ProgramImage(ctx context.Context, path, as, repo string) (ref string, made bool, err error) {
	body, err := os.ReadFile(path)
	if err != nil {
		return "", false, fmt.Errorf("image of program %s: %w", path, err)
	}
	sum := sha256.Sum256(body)
	ref = repo + ":" + hex.EncodeToString(sum[:])[:12]
	if ok, err := HasImage(ctx, ref); err != nil || ok {
		return ref, false, err
	}
	files, err := ProgramFiles(path, as)
	if err != nil {
		return "", false, err
	}
	if err := ImportImage(ctx, ref, files); err != nil {
		return "", false, err
	}
	return ref, true, nil
}

// libDirs are where the host's dynamic loader finds libraries by default.
func libDirs() []string {
	arch := map[string]string{"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu"}[runtime.GOARCH]
	dirs := []string{"/lib/" + arch, "/usr/lib/" + arch, "/lib64", "/usr/lib64", "/lib", "/usr/lib"}
	if arch == "" {
		dirs = dirs[2:]
	}
	return dirs
}

// sharedLibraries are the absolute paths of the ELF interpreter of the
// program at path and of the libraries it needs, transitively; none for a
// static program.
func sharedLibraries(path string) ([]string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			if _, err := p.ReadAt(b, 0); err != nil {
				return nil, fmt.Errorf("read its ELF interpreter: %w", err)
			}
			out = append(out, strings.TrimRight(string(b), "\x00"))
		}
	}
	seen := map[string]bool{}
	var need func(f *elf.File) error
	need = func(f *elf.File) error {
		names, err := f.ImportedLibraries()
		if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
			return err
		}
		for _, n := range names {
			if seen[n] {
				continue
			}
			seen[n] = true
			found := ""
			for _, d := range libDirs() {
				if _, err := os.Stat(filepath.Join(d, n)); err == nil {
					found = filepath.Join(d, n)
					break
				}
			}
			if found == "" {
				return fmt.Errorf("shared library %s not found in %s", n, strings.Join(libDirs(), ", "))
			}
			out = append(out, found)
			lf, err := elf.Open(found)
			if err != nil {
				return err
			}
			err = need(lf)
			lf.Close()
			if err != nil {
				return err
			}
		}
		return nil
	}
	if err := need(f); err != nil {
		return nil, err
	}
	return out, nil
}
