package control

import (
	"context"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/secrets"
)

// errNoSecrets answers on a server built without a secrets store.
var errNoSecrets = &errdefs.Error{Kind: errdefs.ErrUnavailable, Msg: "this server keeps no secrets"}

// Set sets the project's secret name to req's value, usable at req's hosts.
func (ss Secrets) Set(ctx context.Context, name string, req api.SetSecretRequest) (api.Secret, error) {
	if ss.c.cfg.Secrets == nil {
		return api.Secret{}, errNoSecrets
	}
	info, err := ss.c.cfg.Secrets.Set(ctx, ss.project, name, req.Value, secrets.Scope{Hosts: req.Hosts, AllowHTTP: req.AllowHTTP})
	if err != nil {
		return api.Secret{}, err
	}
	return secretAPI(info), nil
}

// List returns the project's secrets, names and times only.
func (ss Secrets) List(ctx context.Context) (api.SecretList, error) {
	if ss.c.cfg.Secrets == nil {
		return api.SecretList{}, errNoSecrets
	}
	infos, err := ss.c.cfg.Secrets.List(ctx, ss.project)
	if err != nil {
		return api.SecretList{}, err
	}
	list := api.SecretList{Secrets: []api.Secret{}}
	for _, i := range infos {
		list.Secrets = append(list.Secrets, secretAPI(i))
	}
	return list, nil
}

// Delete removes the project's secret name.
func (ss Secrets) Delete(ctx context.Context, name string) error {
	if ss.c.cfg.Secrets == nil {
		return errNoSecrets
	}
	return ss.c.cfg.Secrets.Delete(ctx, ss.project, name)
}

func secretAPI(i secrets.Info) api.Secret {
	hosts := i.Hosts
	if hosts == nil {
		hosts = []string{}
	}
	return api.Secret{Name: i.Name, Hosts: hosts, AllowHTTP: i.AllowHTTP, CreatedAt: i.CreatedAt, UpdatedAt: i.UpdatedAt}
}
