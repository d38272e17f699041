// Package s3 is the image store backend of S3-compatible object storage,
// through minio-go: a small client that speaks plain S3 (path-style
// addressing, multipart uploads of streams of unknown length) to AWS and to
// every S3-compatible server alike, with far fewer dependencies than the
// AWS SDK for Go v2 (docs/storage.md).
//
// Where the bucket is comes from --image-store s3://BUCKET/PREFIX; the
// endpoint, region and credentials from the environment only
// (AWS_ENDPOINT_URL, AWS_REGION, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
// AWS_SESSION_TOKEN), never from flags, which other users see in ps.
package s3

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/lizard-build/lizard/internal/imagestore"
)

// PartSize is the part of a multipart upload: an upload of unknown length
// buffers one part, so it bounds the memory an upload takes; 10,000 parts
// of it (S3's limit) hold 160 GiB.
const PartSize = 16 << 20

// Bucket is a bucket (and a key prefix in it) of an S3-compatible server.
type Bucket struct {
	client *minio.Client
	bucket string
	prefix string // "" or ending in "/"
	where  string
}

var _ imagestore.Bucket = (*Bucket)(nil)

// Open returns the bucket of u (s3://BUCKET[/PREFIX]) with the endpoint,
// region and credentials getenv gives. It does not reach the server:
// Check does.
func Open(u *url.URL, getenv func(string) string) (*Bucket, error) {
	if u.Scheme != "s3" || u.Host == "" {
		return nil, fmt.Errorf("--image-store %s: want s3://BUCKET/PREFIX", u.Redacted())
	}
	if u.User != nil || u.RawQuery != "" {
		return nil, fmt.Errorf("--image-store: credentials and options come from the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL, AWS_REGION), not the URL")
	}
	endpoint, secure := "s3.amazonaws.com", true
	if e := getenv("AWS_ENDPOINT_URL"); e != "" {
		eu, err := url.Parse(e)
		if err != nil || eu.Host == "" || (eu.Scheme != "http" && eu.Scheme != "https") {
			return nil, fmt.Errorf("AWS_ENDPOINT_URL %q: want http(s)://HOST[:PORT]", e)
		}
		endpoint, secure = eu.Host, eu.Scheme == "https"
	}
	id, secret := getenv("AWS_ACCESS_KEY_ID"), getenv("AWS_SECRET_ACCESS_KEY")
	if id == "" || secret == "" {
		return nil, errors.New("--image-store s3://...: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the environment")
	}
	region := getenv("AWS_REGION")
	if region == "" {
		region = "us-east-1"
	}
	c, err := minio.New(endpoint, &minio.Options{
		Creds:        credentials.NewStaticV4(id, secret, getenv("AWS_SESSION_TOKEN")),
		Secure:       secure,
		Region:       region,
		BucketLookup: minio.BucketLookupPath,
	})
	if err != nil {
		return nil, fmt.Errorf("AWS_ENDPOINT_URL %s: %w", endpoint, err)
	}
	prefix := strings.Trim(u.Path, "/")
	if prefix != "" {
		prefix += "/"
	}
	return &Bucket{client: c, bucket: u.Host, prefix: prefix, where: fmt.Sprintf("s3://%s/%s at %s", u.Host, prefix, endpoint)}, nil
}

func (b *Bucket) String() string { return b.where }

// Check implements imagestore.Bucket. It lists one key rather than asking
// HeadBucket, whose answers have no body: a server may say 404 there for a
// key it does not know, where a listing says which.
func (b *Bucket) Check(ctx context.Context) error {
	var err error
	for o := range b.client.ListObjects(ctx, b.bucket, minio.ListObjectsOptions{Prefix: b.prefix, MaxKeys: 1}) {
		if err = o.Err; err != nil {
			break
		}
	}
	if err == nil {
		return nil
	}
	resp := minio.ToErrorResponse(err)
	switch resp.Code {
	// XAdminUserNotFound is versitygw's for a key it does not know.
	case "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken", "ExpiredToken", "XAdminUserNotFound":
		return fmt.Errorf("image store %s refused the credentials in AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY: %w", b, err)
	case "NoSuchBucket":
		return fmt.Errorf("image store %s: bucket %q does not exist (--image-store); create it first", b, b.bucket)
	}
	if resp.StatusCode == 401 || resp.StatusCode == 403 {
		return fmt.Errorf("image store %s refused the credentials in AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY: %w", b, err)
	}
	return fmt.Errorf("image store %s did not answer (check AWS_ENDPOINT_URL and AWS_REGION): %w", b, err)
}

// Put implements imagestore.Bucket: a multipart upload of PartSize parts.
func (b *Bucket) Put(ctx context.Context, key string, r io.Reader) error {
	_, err := b.client.PutObject(ctx, b.bucket, b.prefix+key, r, -1, minio.PutObjectOptions{
		PartSize: PartSize, ContentType: "application/octet-stream", DisableContentSha256: true})
	if err != nil {
		return fmt.Errorf("storing %s in %s: %w", key, b, err)
	}
	return nil
}

// Get implements imagestore.Bucket.
func (b *Bucket) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	obj, err := b.client.GetObject(ctx, b.bucket, b.prefix+key, minio.GetObjectOptions{})
	if err == nil {
		// GetObject is lazy: Stat makes the request, and tells a
		// missing key apart.
		_, err = obj.Stat()
	}
	if err != nil {
		if obj != nil {
			obj.Close()
		}
		if minio.ToErrorResponse(err).Code == "NoSuchKey" {
			return nil, fmt.Errorf("reading %s from %s: %w", key, b, imagestore.ErrNotFound)
		}
		return nil, fmt.Errorf("reading %s from %s: %w", key, b, err)
	}
	return obj, nil
}

// Delete implements imagestore.Bucket.
func (b *Bucket) Delete(ctx context.Context, key string) error {
	if err := b.client.RemoveObject(ctx, b.bucket, b.prefix+key, minio.RemoveObjectOptions{}); err != nil &&
		minio.ToErrorResponse(err).Code != "NoSuchKey" {
		return fmt.Errorf("deleting %s from %s: %w", key, b, err)
	}
	return nil
}

// List implements imagestore.Bucket.
func (b *Bucket) List(ctx context.Context, prefix string) ([]string, error) {
	var keys []string
	for o := range b.client.ListObjects(ctx, b.bucket, minio.ListObjectsOptions{Prefix: b.prefix + prefix, Recursive: true}) {
		if o.Err != nil {
			return nil, fmt.Errorf("listing %s in %s: %w", prefix, b, o.Err)
		}
		keys = append(keys, strings.TrimPrefix(o.Key, b.prefix))
	}
	return keys, nil
}
