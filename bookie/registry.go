package bookie

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/bookie-go/bookie/meta"
)

// identity returns the bookie id used in cookies and the metadata store, and
// whether it is stable across restarts (a Listen port of 0 is not: such a
// bookie skips the metadata store's cookie check).
func (c *Config) identity() (id string, stable bool) {
	if c.Advertise != "" {
		return c.Advertise, true
	}
	_, port, err := net.SplitHostPort(c.Listen)
	return c.Listen, err == nil && port != "0"
}

// id returns the id the bookie registers under: its stable identity, or the
// bound address when it has none. Valid once the listener is bound (OnBoot);
// safe from any goroutine after that.
func (b *Bookie) id() string {
	if id, stable := b.cfg.identity(); stable {
		return id
	}
	return b.addr
}

// openMeta connects to the metadata store and returns the instance id it
// records for this bookie ("" if none, or if the identity is not stable).
func (b *Bookie) openMeta() (expected string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if b.meta, err = meta.Open(ctx, b.cfg.Metadata); err != nil {
		return "", fmt.Errorf("bookie: metadata store %s: %w", b.cfg.Metadata, err)
	}
	id, stable := b.cfg.identity()
	if !stable {
		return "", nil
	}
	mc, err := b.meta.GetCookie(ctx, meta.BookieID(id))
	switch {
	case errors.Is(err, meta.ErrNoSuchCookie):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("bookie: read cookie from metadata store: %w", err)
	}
	b.metaCookie = mc
	return mc.InstanceID, nil
}

// publishCookie records the bookie's instance id in the metadata store when
// it differs from what is there (first start, or a limbo restart).
func (b *Bookie) publishCookie() error {
	id, stable := b.cfg.identity()
	if !stable || b.metaCookie.InstanceID == b.cookie.Instance {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cluster, err := b.meta.ClusterID(ctx)
	if err != nil {
		return err
	}
	c := b.metaCookie
	c.BookieID, c.ClusterID, c.InstanceID = meta.BookieID(id), cluster, b.cookie.Instance
	if b.metaCookie, err = b.meta.StoreCookie(ctx, c); err != nil {
		return fmt.Errorf("bookie: store cookie in metadata store: %w", err)
	}
	return nil
}

// register announces the bookie as live under a lease.
func (b *Bookie) register() error {
	id := b.id()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ro, _ := b.ReadOnly()
	reg, err := b.meta.RegisterBookie(ctx, meta.BookieInfo{
		ID: meta.BookieID(id), InstanceID: b.cookie.Instance, ReadOnly: ro, Version: Build, Rack: b.cfg.Rack,
		Admin: b.advertisedAdminURL(id), TLSAddr: advertisedAdmin(b.TLSAddr(), id),
	}, time.Duration(b.cfg.RegistrationTTL))
	if err != nil {
		return fmt.Errorf("bookie: register in metadata store: %w", err)
	}
	b.reg = reg
	return nil
}

// announceReadOnly updates the registration after a read-only change. Each
// call publishes the state current when it gets announceMu, so overlapping
// announcements end with the latest state, whatever order they run in.
func (b *Bookie) announceReadOnly() {
	if b.reg == nil {
		return
	}
	go func() {
		b.announceMu.Lock()
		defer b.announceMu.Unlock()
		ro, _ := b.ReadOnly()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := b.reg.SetReadOnly(ctx, ro); err != nil {
			b.log.Warn("could not announce read-only state", "read_only", ro, "err", err)
		}
	}()
}

func first[A, B any](a A, _ B) A { return a }

// advertisedAdminURL is the admin address the registration names:
// advertisedAdmin's host:port, as "https://host:port" when the admin
// listener serves TLS, so that bk speaks TLS to it.
func (b *Bookie) advertisedAdminURL(id string) string {
	a := advertisedAdmin(b.AdminAddr(), id)
	if a != "" && b.cfg.AdminTLS {
		return "https://" + a
	}
	return a
}

// advertisedAdmin returns the admin (or TLS) address to register: the listener's,
// with an unspecified host (0.0.0.0, ::) replaced by the bookie id's host.
// Empty without such a listener.
func advertisedAdmin(listen, id string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return ""
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		if h, _, err := net.SplitHostPort(id); err == nil {
			host = h
		}
	}
	return net.JoinHostPort(host, port)
}
