package objstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/eventstore/objstore"
	"github.com/sluicehq/sluice/eventstore/objstore/filestore"
)

// overwriting ignores the condition of Create, like a store without
// If-None-Match support.
type overwriting struct{ objstore.Bucket }

func (o overwriting) Create(ctx context.Context, key string, body []byte) (objstore.ObjectInfo, error) {
	return o.Put(ctx, key, body, objstore.PutOptions{})
}

// lying refuses the second create but overwrites anyway.
type lying struct{ objstore.Bucket }

func (l lying) Create(ctx context.Context, key string, body []byte) (objstore.ObjectInfo, error) {
	oi, err := l.Bucket.Create(ctx, key, body)
	if errors.Is(err, objstore.ErrPreconditionFailed) {
		_, _ = l.Put(ctx, key, body, objstore.PutOptions{})
	}
	return oi, err
}

// down fails every call as an outage.
type down struct{ objstore.Bucket }

func (down) Create(context.Context, string, []byte) (objstore.ObjectInfo, error) {
	return objstore.ObjectInfo{}, fmt.Errorf("dial tcp: connection refused: %w", objstore.ErrUnavailable)
}

func newFileBucket(t *testing.T) *filestore.Bucket {
	t.Helper()
	b, err := filestore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func TestSelfTest(t *testing.T) {
	for _, tc := range []struct {
		name string
		wrap func(objstore.Bucket) objstore.Bucket
		want error
	}{
		{"honours", func(b objstore.Bucket) objstore.Bucket { return b }, nil},
		{"overwrites", func(b objstore.Bucket) objstore.Bucket { return overwriting{b} }, objstore.ErrNoConditionalCreate},
		{"refuses but overwrites", func(b objstore.Bucket) objstore.Bucket { return lying{b} }, objstore.ErrNoConditionalCreate},
		{"unavailable", func(b objstore.Bucket) objstore.Bucket { return down{b} }, objstore.ErrUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inner := newFileBucket(t)
			err := objstore.SelfTest(t.Context(), tc.wrap(inner))
			if tc.want == nil {
				if err != nil {
					t.Fatalf("SelfTest = %v", err)
				}
			} else if !errors.Is(err, tc.want) {
				t.Fatalf("SelfTest = %v, want %v", err, tc.want)
			}
			if errors.Is(err, objstore.ErrNoConditionalCreate) && !strings.Contains(err.Error(), "refuses to start") {
				t.Fatalf("message does not say sluice refuses to start: %v", err)
			}
			left, lerr := inner.List(t.Context(), objstore.SelfTestPrefix, "", 0)
			if lerr != nil || len(left) != 0 {
				t.Fatalf("probe objects left behind: %v (%v)", left, lerr)
			}
		})
	}
}

func TestValidateKey(t *testing.T) {
	for _, key := range []string{
		"segments/00000000000000000001-00000000000000000500.jsonl",
		"checkpoints/relay-1.json",
		"_sluice/selftest/abc",
		"a", "a.b/c-d_e~f", "ünï/cödé", "with space/and+plus=&?",
		"..a/b..", ".hidden/x", "a/.objstor",
	} {
		if err := objstore.ValidateKey(key); err != nil {
			t.Errorf("ValidateKey(%q) = %v, want ok", key, err)
		}
	}
	for _, key := range []string{
		"", "/a", "a/", "a//b", ".", "..", "../a", "a/../b", "a/./b", "./a",
		`a\b`, "a\x00b", "a\tb", "a\x7fb", "\xc3\x28",
		".objstore", "x/.objstore-tmp/y", strings.Repeat("x", 1025), strings.Repeat("x", 256),
	} {
		if err := objstore.ValidateKey(key); !errors.Is(err, objstore.ErrInvalidKey) {
			t.Errorf("ValidateKey(%q) = %v, want ErrInvalidKey", key, err)
		}
	}
}

func FuzzValidateKey(f *testing.F) {
	for _, s := range []string{"segments/a.jsonl", "../x", "a//b", "a/.objstore/b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		if objstore.ValidateKey(key) != nil {
			return
		}
		// A valid key is a clean relative path.
		for seg := range strings.SplitSeq(key, "/") {
			if seg == "" || seg == "." || seg == ".." || strings.ContainsAny(seg, "\\\x00") {
				t.Fatalf("valid key %q has segment %q", key, seg)
			}
		}
	})
}
