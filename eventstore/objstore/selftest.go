package objstore

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"
)

// SelfTestPrefix is where SelfTest writes its probe objects.
const SelfTestPrefix = "_sluice/selftest/"

// ErrNoConditionalCreate is returned by SelfTest when the backend let a
// second conditional create of the same key succeed (or changed the
// object while refusing it).
var ErrNoConditionalCreate = errors.New("objstore: backend does not honour conditional create (If-None-Match: *); sluice refuses to start because segments could be overwritten")

// SelfTest is the start-up check of docs/objstore.md#backends: it creates a fresh probe key
// under SelfTestPrefix twice and requires the second Create to fail with
// ErrPreconditionFailed and the object to keep the first body; then it
// deletes the probe. It returns ErrNoConditionalCreate when the backend
// overwrote, or the (wrapped) store error when the store could not be used
// at all — ErrUnavailable for outages, ErrNotFound for a missing bucket.
// A failed delete of the probe is ignored: buckets with object lock refuse
// deletes, and the probe is a few bytes.
func SelfTest(ctx context.Context, b Bucket) error {
	var rnd [12]byte
	_, _ = rand.Read(rnd[:])
	key := SelfTestPrefix + hex.EncodeToString(rnd[:])
	first := []byte("sluice conditional-create self-test: first\n")
	if _, err := b.Create(ctx, key, first); err != nil {
		return fmt.Errorf("objstore: self-test: create %s: %w", key, err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = b.Delete(dctx, key)
	}()

	_, err := b.Create(ctx, key, []byte("sluice conditional-create self-test: second\n"))
	switch {
	case err == nil:
		return fmt.Errorf("%w (second create of %s succeeded)", ErrNoConditionalCreate, key)
	case !errors.Is(err, ErrPreconditionFailed):
		return fmt.Errorf("objstore: self-test: second create of %s: %w", key, err)
	}
	got, _, err := b.Get(ctx, key)
	if err != nil {
		return fmt.Errorf("objstore: self-test: read back %s: %w", key, err)
	}
	if !bytes.Equal(got, first) {
		return fmt.Errorf("%w (%s was changed by a refused create)", ErrNoConditionalCreate, key)
	}
	return nil
}
