package spec

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// WriteBundle writes config.json, the rootfs skeleton and the masks into
// dir, which must be absent or empty: warden never overwrites what it did
// not create. On failure it removes only what it wrote.
func WriteBundle(dir string, b *Bundle) (err error) {
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		return fmt.Errorf("%w: bundle directory %s is not empty; remove it or choose another --out", ErrInvalid, dir)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("bundle directory %s: %w", dir, err)
	}
	created := false
	if _, statErr := os.Stat(dir); errors.Is(statErr, fs.ErrNotExist) {
		created = true
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			cleanup(dir, created)
		}
	}()
	// The bundle is traversed by the sandbox's unprivileged host user.
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	data, err := json.MarshalIndent(b.Spec, "", "\t")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), append(data, '\n'), 0o644); err != nil {
		return err
	}
	if err := writeTree(filepath.Join(dir, "rootfs"), b.Rootfs); err != nil {
		return err
	}
	return writeTree(filepath.Join(dir, "masks"), b.Masks)
}

// cleanup removes what WriteBundle wrote: the directory itself when it
// created it, else only the entries it adds.
func cleanup(dir string, created bool) {
	if created {
		os.RemoveAll(dir)
		return
	}
	for _, name := range []string{"config.json", "rootfs", "masks"} {
		os.RemoveAll(filepath.Join(dir, name))
	}
}

func writeTree(root string, entries []Entry) error {
	if err := os.Mkdir(root, 0o755); err != nil {
		return err
	}
	for _, e := range entries {
		p := filepath.Join(root, e.Path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		switch e.Kind {
		case Dir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				return err
			}
		case File:
			if err := os.WriteFile(p, e.Data, 0o644); err != nil {
				return err
			}
		case Symlink:
			if err := os.Symlink(e.Target, p); err != nil {
				return err
			}
		}
	}
	return nil
}
