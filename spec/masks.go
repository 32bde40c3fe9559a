package spec

import "path/filepath"

// WriteMasks writes only a bundle's masks into dir/masks: a warm pool's
// claim binds the masks under the session's folders into a container that
// is already running from another bundle.
func WriteMasks(dir string, b *Bundle) error {
	return writeTree(filepath.Join(dir, "masks"), b.Masks)
}
