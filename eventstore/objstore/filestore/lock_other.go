//go:build !unix

package filestore

import "errors"

// lock needs flock(2): without it Put and Delete refuse to run rather than
// give up the compare-and-swap guarantee. The file backend targets Unix.
func (b *Bucket) lock(string) (func(), error) {
	return nil, errors.New("lock: the file backend needs flock(2) (Unix)")
}
