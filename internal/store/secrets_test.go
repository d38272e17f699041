package store

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"
)

func TestSecrets(t *testing.T) {
	forEachStore(t, func(t *testing.T, be backend) {
		ctx := context.Background()
		s := be.open(t)
		for _, p := range []string{"p", "q"} {
			if err := s.CreateProject(ctx, p, time.Now()); err != nil {
				t.Fatal(err)
			}
		}
		t0 := time.UnixMilli(time.Now().UnixMilli()).UTC()
		t1 := t0.Add(time.Minute)
		put := func(project, name string, sealed []byte, at time.Time) {
			t.Helper()
			if err := s.Secrets().Put(ctx, Secret{ProjectID: project, Name: name, KeyID: "k1", Sealed: sealed, CreatedAt: at, UpdatedAt: at}); err != nil {
				t.Fatalf("PutSecret(%s, %s): %v", project, name, err)
			}
		}
		put("p", "TOKEN", []byte{0, 1, 2}, t0)
		put("p", "A", []byte("a"), t0)
		put("q", "TOKEN", []byte("other project"), t0)
		// A second set replaces the value and keeps the first CreatedAt.
		put("p", "TOKEN", []byte{9, 9}, t1)
		got, err := s.Secrets().Get(ctx, "p", "TOKEN")
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Sealed, []byte{9, 9}) || !got.CreatedAt.Equal(t0) || !got.UpdatedAt.Equal(t1) || got.KeyID != "k1" {
			t.Errorf("GetSecret after a second set = %+v; want sealed [9 9], created %v, updated %v", got, t0, t1)
		}
		if _, err := s.Secrets().Get(ctx, "p", "NOPE"); !errors.Is(err, ErrNotFound) {
			t.Errorf("GetSecret of an unknown name: %v; want ErrNotFound", err)
		}
		list, err := s.Secrets().List(ctx, "p")
		if err != nil || len(list) != 2 || list[0].Name != "A" || list[1].Name != "TOKEN" {
			t.Fatalf("ListSecrets(p) = %+v, %v; want A, TOKEN", list, err)
		}
		for _, l := range list {
			if l.Sealed != nil {
				t.Errorf("ListSecrets returned the sealed value of %s", l.Name)
			}
		}
		if list, err := s.Secrets().List(ctx, "none"); err != nil || len(list) != 0 {
			t.Errorf("ListSecrets of a project with none = %+v, %v", list, err)
		}
		if err := s.Secrets().Delete(ctx, "p", "TOKEN"); err != nil {
			t.Fatal(err)
		}
		if err := s.Secrets().Delete(ctx, "p", "TOKEN"); !errors.Is(err, ErrNotFound) {
			t.Errorf("deleting it again: %v; want ErrNotFound", err)
		}
		// Another project's secret of the same name is untouched.
		if got, err := s.Secrets().Get(ctx, "q", "TOKEN"); err != nil || string(got.Sealed) != "other project" {
			t.Errorf("q's TOKEN after p's was deleted = %+v, %v", got, err)
		}
		// Hosts and allow_http are recorded, replaced by a later set
		// (narrowed here), and listed; a secret without them (as one set
		// before they were recorded) reads back with none.
		if err := s.Secrets().Put(ctx, Secret{ProjectID: "p", Name: "H", KeyID: "k1", Sealed: []byte("h"), Hosts: []string{"api.example.com", "*.example.org"},
			AllowHTTP: true, CreatedAt: t0, UpdatedAt: t0}); err != nil {
			t.Fatal(err)
		}
		if got, err := s.Secrets().Get(ctx, "p", "H"); err != nil || len(got.Hosts) != 2 || got.Hosts[1] != "*.example.org" || !got.AllowHTTP {
			t.Errorf("GetSecret(H) = %+v, %v; want its two hosts and AllowHTTP", got, err)
		}
		if err := s.Secrets().Put(ctx, Secret{ProjectID: "p", Name: "H", KeyID: "k1", Sealed: []byte("h"), Hosts: []string{"api.example.com"},
			CreatedAt: t1, UpdatedAt: t1}); err != nil {
			t.Fatal(err)
		}
		list, err = s.Secrets().List(ctx, "p")
		if err != nil || len(list) != 2 || list[1].Name != "H" || len(list[1].Hosts) != 1 || list[1].AllowHTTP || list[0].Hosts != nil {
			t.Errorf("ListSecrets(p) after H was narrowed = %+v, %v; want A without hosts, H with api.example.com alone", list, err)
		}
		if err := s.Secrets().Put(ctx, Secret{ProjectID: "ghost", Name: "X", KeyID: "k", Sealed: []byte("x"), CreatedAt: t0, UpdatedAt: t0}); err == nil {
			t.Errorf("a secret of a project that does not exist was recorded")
		}
	})
}
