package s3_test

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"github.com/lizard-build/lizard/internal/imagestore/s3"
	"github.com/lizard-build/lizard/internal/testenv"
)

// A node refuses to start on an image store it cannot use: the error
// names the setting at fault.
func TestCheckNamesTheSetting(t *testing.T) {
	srv := testenv.S3Server(t)
	env := func(over map[string]string) func(string) string {
		return func(k string) string {
			if v, ok := over[k]; ok {
				return v
			}
			return srv.Getenv(k)
		}
	}
	for _, tc := range []struct {
		name, url string
		env       map[string]string
		want      string
	}{
		{"good", "s3://" + srv.Bucket + "/p", nil, ""},
		{"wrong secret", "s3://" + srv.Bucket, map[string]string{"AWS_SECRET_ACCESS_KEY": "wrong"}, "AWS_SECRET_ACCESS_KEY"},
		{"unknown key", "s3://" + srv.Bucket, map[string]string{"AWS_ACCESS_KEY_ID": "nobody"}, "AWS_ACCESS_KEY_ID"},
		{"missing bucket", "s3://nosuchbucket/p", nil, `bucket "nosuchbucket" does not exist`},
		{"store away", "s3://" + srv.Bucket, map[string]string{"AWS_ENDPOINT_URL": "http://127.0.0.1:1"}, "AWS_ENDPOINT_URL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u, _ := url.Parse(tc.url)
			b, err := s3.Open(u, env(tc.env))
			if err != nil {
				t.Fatal(err)
			}
			err = b.Check(context.Background())
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Check: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Check: %v; want an error naming %s", err, tc.want)
			}
		})
	}
}

func TestOpenRefusesBadSettings(t *testing.T) {
	good := map[string]string{"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"}
	for _, tc := range []struct {
		name, url string
		env       map[string]string
		want      string
	}{
		{"no bucket", "s3:///p", good, "s3://BUCKET"},
		{"credentials in the URL", "s3://k:s@b/p", good, "from the environment"},
		{"no credentials", "s3://b/p", map[string]string{}, "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"},
		{"bad endpoint", "s3://b/p", map[string]string{"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s", "AWS_ENDPOINT_URL": "ftp://x"}, "AWS_ENDPOINT_URL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u, err := url.Parse(tc.url)
			if err != nil {
				t.Fatal(err)
			}
			_, err = s3.Open(u, func(k string) string { return tc.env[k] })
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Open: %v; want an error naming %s", err, tc.want)
			}
		})
	}
}
