//go:build !linux

package filestore

// createUnnamed: only Linux has unnamed files (O_TMPFILE); elsewhere Create
// always takes the temporary-file path.
func (b *Bucket) createUnnamed(dir, base string, body []byte) (handled bool, err error) {
	return false, nil
}
