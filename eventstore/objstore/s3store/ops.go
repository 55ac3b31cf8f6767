package s3store

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"path"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/sluicehq/sluice/eventstore/objstore"
)

// Create writes key with If-None-Match: *.
func (b *Bucket) Create(ctx context.Context, key string, body []byte) (objstore.ObjectInfo, error) {
	if err := objstore.ValidateKey(key); err != nil {
		return objstore.ObjectInfo{}, fmt.Errorf("s3store: %w", err)
	}
	d := b.deadline(ctx, int64(len(body)))
	defer d.done()
	wctx, rec := withWriteRecord(d.ctx)
	out, err := b.client.PutObject(wctx, b.putInput(key, body, func(in *s3.PutObjectInput) {
		in.IfNoneMatch = aws.String("*")
	}))
	if err != nil {
		return objstore.ObjectInfo{}, writeErr(ctx, "create", key, rec, d.wrap(err))
	}
	return objstore.ObjectInfo{Key: key, Size: int64(len(body)), ETag: etag(out.ETag)}, nil
}

// Put writes key, with If-Match when opts.IfMatch is set.
func (b *Bucket) Put(ctx context.Context, key string, body []byte, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	if err := objstore.ValidateKey(key); err != nil {
		return objstore.ObjectInfo{}, fmt.Errorf("s3store: %w", err)
	}
	d := b.deadline(ctx, int64(len(body)))
	defer d.done()
	wctx, rec := withWriteRecord(d.ctx)
	out, err := b.client.PutObject(wctx, b.putInput(key, body, func(in *s3.PutObjectInput) {
		if m := strings.Trim(opts.IfMatch, `"`); m != "" {
			in.IfMatch = aws.String(`"` + m + `"`)
		}
	}))
	if err != nil {
		return objstore.ObjectInfo{}, writeErr(ctx, "put", key, rec, d.wrap(err))
	}
	return objstore.ObjectInfo{Key: key, Size: int64(len(body)), ETag: etag(out.ETag)}, nil
}

func (b *Bucket) putInput(key string, body []byte, cond func(*s3.PutObjectInput)) *s3.PutObjectInput {
	in := &s3.PutObjectInput{
		Bucket:        aws.String(b.bucket),
		Key:           aws.String(key),
		Body:          bytes.NewReader(body),
		ContentLength: aws.Int64(int64(len(body))),
		ContentType:   aws.String(contentType(key)),
	}
	cond(in)
	return in
}

// contentType names the formats of docs/objstore.md#layout so that data-lake tools and
// consoles show segments and checkpoints as what they are.
func contentType(key string) string {
	switch path.Ext(key) {
	case ".jsonl":
		return "application/jsonl"
	case ".json":
		return "application/json"
	}
	return "application/octet-stream"
}

// Get reads a whole object.
func (b *Bucket) Get(ctx context.Context, key string) ([]byte, objstore.ObjectInfo, error) {
	if err := objstore.ValidateKey(key); err != nil {
		return nil, objstore.ObjectInfo{}, fmt.Errorf("s3store: %w", err)
	}
	d := b.deadline(ctx, 0)
	defer d.done()
	out, err := b.client.GetObject(d.ctx, &s3.GetObjectInput{Bucket: aws.String(b.bucket), Key: aws.String(key)})
	if err != nil {
		return nil, objstore.ObjectInfo{}, classify(ctx, "get", key, d.wrap(err))
	}
	defer out.Body.Close()
	d.extend(aws.ToInt64(out.ContentLength))
	body, err := readBody(out.Body, aws.ToInt64(out.ContentLength))
	if err != nil {
		return nil, objstore.ObjectInfo{}, classify(ctx, "get", key, d.wrap(err))
	}
	if out.ContentLength != nil && int64(len(body)) != *out.ContentLength {
		return nil, objstore.ObjectInfo{}, classify(ctx, "get", key, fmt.Errorf("read %d of %d bytes: %w", len(body), *out.ContentLength, io.ErrUnexpectedEOF))
	}
	return body, objstore.ObjectInfo{
		Key: key, Size: int64(len(body)), ETag: etag(out.ETag), LastModified: aws.ToTime(out.LastModified).UTC(),
	}, nil
}

// GetRange reads length bytes at offset with a Range GET; the range must
// lie inside the object.
func (b *Bucket) GetRange(ctx context.Context, key string, offset, length int64) ([]byte, error) {
	if err := objstore.ValidateKey(key); err != nil {
		return nil, fmt.Errorf("s3store: %w", err)
	}
	if offset < 0 || length < 1 || length > math.MaxInt64-offset {
		return nil, fmt.Errorf("s3store: get %s [%d+%d]: %w", key, offset, length, objstore.ErrInvalidRange)
	}
	d := b.deadline(ctx, length)
	defer d.done()
	out, err := b.client.GetObject(d.ctx, &s3.GetObjectInput{
		Bucket: aws.String(b.bucket),
		Key:    aws.String(key),
		Range:  aws.String(fmt.Sprintf("bytes=%d-%d", offset, offset+length-1)),
	})
	if err != nil {
		return nil, classify(ctx, fmt.Sprintf("get [%d+%d]", offset, length), key, d.wrap(err))
	}
	defer out.Body.Close()
	if n := aws.ToInt64(out.ContentLength); n > length {
		d.extend(n) // a store that ignored Range sends the whole object
	}
	body, err := readBody(out.Body, min(aws.ToInt64(out.ContentLength), length))
	if err != nil {
		return nil, classify(ctx, "get", key, d.wrap(err))
	}
	if out.ContentRange == nil && int64(len(body)) > length {
		// A store that ignored Range sent the whole object.
		if offset+length > int64(len(body)) {
			return nil, fmt.Errorf("s3store: get %s [%d+%d] of %d bytes: %w", key, offset, length, len(body), objstore.ErrInvalidRange)
		}
		body = body[offset : offset+length]
	}
	if int64(len(body)) != length {
		// S3 answers a range running past the end with the bytes it has.
		return nil, fmt.Errorf("s3store: get %s [%d+%d]: only %d bytes (%s): %w",
			key, offset, length, len(body), aws.ToString(out.ContentRange), objstore.ErrInvalidRange)
	}
	return body, nil
}

// readBody reads a response body, sized up front when the length is known.
func readBody(r io.Reader, size int64) ([]byte, error) {
	if size <= 0 {
		return io.ReadAll(r)
	}
	var buf bytes.Buffer
	buf.Grow(int(size) + bytes.MinRead)
	_, err := buf.ReadFrom(r)
	return buf.Bytes(), err
}

// Stat returns an object's info (HEAD).
func (b *Bucket) Stat(ctx context.Context, key string) (objstore.ObjectInfo, error) {
	if err := objstore.ValidateKey(key); err != nil {
		return objstore.ObjectInfo{}, fmt.Errorf("s3store: %w", err)
	}
	d := b.deadline(ctx, 0)
	defer d.done()
	out, err := b.client.HeadObject(d.ctx, &s3.HeadObjectInput{Bucket: aws.String(b.bucket), Key: aws.String(key)})
	if err != nil {
		return objstore.ObjectInfo{}, classify(ctx, "stat", key, d.wrap(err))
	}
	return objstore.ObjectInfo{
		Key: key, Size: aws.ToInt64(out.ContentLength), ETag: etag(out.ETag), LastModified: aws.ToTime(out.LastModified).UTC(),
	}, nil
}

// List pages through ListObjectsV2 (StartAfter, Prefix, MaxKeys) until
// limit objects are found or the listing ends. Keys that ValidateKey
// rejects (written by other tools) are skipped, as the file backend does.
func (b *Bucket) List(ctx context.Context, prefix, startAfter string, limit int) ([]objstore.ObjectInfo, error) {
	in := &s3.ListObjectsV2Input{Bucket: aws.String(b.bucket)}
	if prefix != "" {
		in.Prefix = aws.String(prefix)
	}
	if startAfter != "" {
		in.StartAfter = aws.String(startAfter)
	}
	var out []objstore.ObjectInfo
	for {
		page := int32(listPage)
		if limit > 0 {
			page = int32(min(limit-len(out), listPage))
		}
		in.MaxKeys = aws.Int32(page)
		res, err := b.listPage(ctx, in)
		if err != nil {
			return nil, classify(ctx, fmt.Sprintf("list after %q", startAfter), prefix+"*", err)
		}
		for _, o := range res.Contents {
			key := aws.ToString(o.Key)
			if objstore.ValidateKey(key) != nil {
				continue
			}
			out = append(out, objstore.ObjectInfo{
				Key: key, Size: aws.ToInt64(o.Size), ETag: etag(o.ETag), LastModified: aws.ToTime(o.LastModified).UTC(),
			})
		}
		if (limit > 0 && len(out) >= limit) || !aws.ToBool(res.IsTruncated) || res.NextContinuationToken == nil {
			return out, nil
		}
		in.ContinuationToken = res.NextContinuationToken
	}
}

// listPage runs one ListObjectsV2 call under its own deadline (a page is
// about 250 bytes a key: its transfer time counts).
func (b *Bucket) listPage(ctx context.Context, in *s3.ListObjectsV2Input) (*s3.ListObjectsV2Output, error) {
	d := b.deadline(ctx, int64(aws.ToInt32(in.MaxKeys))*256)
	defer d.done()
	res, err := b.client.ListObjectsV2(d.ctx, in)
	return res, d.wrap(err)
}

// Delete removes key; a missing key is not an error.
func (b *Bucket) Delete(ctx context.Context, key string) error {
	if err := objstore.ValidateKey(key); err != nil {
		return fmt.Errorf("s3store: %w", err)
	}
	d := b.deadline(ctx, 0)
	defer d.done()
	_, err := b.client.DeleteObject(d.ctx, &s3.DeleteObjectInput{Bucket: aws.String(b.bucket), Key: aws.String(key)})
	if err != nil && errorCode(err) != "NoSuchKey" {
		return classify(ctx, "delete", key, d.wrap(err))
	}
	return nil
}

// etag strips the quotes S3 puts around ETags.
func etag(s *string) string { return strings.Trim(aws.ToString(s), `"`) }
