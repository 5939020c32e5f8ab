package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/bookie-go/bookie/client"
	"github.com/bookie-go/bookie/meta"
)

// defaultMetadata is the endpoint used when neither --metadata, BK_METADATA
// nor the CLI config file names one; bk local serves it by default.
const defaultMetadata = "etcd://127.0.0.1:2379"

// cliConfig is the CLI config file (JSON) for commands that talk to a
// cluster: ledger, bookies, bookie status. Unknown keys are an error.
type cliConfig struct {
	// Metadata is the metadata endpoint, as --metadata takes it.
	Metadata string `json:"metadata"`
	// SecretFile holds the cluster secret, as --secret-file takes it.
	SecretFile string `json:"secret_file"`
}

// defaultCLIConfigPath returns $XDG_CONFIG_HOME/bk/config.json, else
// ~/.config/bk/config.json; "" when neither can be found.
func defaultCLIConfigPath() string {
	if d := os.Getenv("XDG_CONFIG_HOME"); d != "" {
		return filepath.Join(d, "bk", "config.json")
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".config", "bk", "config.json")
	}
	return ""
}

// clusterFlags are the flags every command that talks to a cluster takes.
type clusterFlags struct {
	metadata, config, secretFile string
	bookieTLS                    bookieTLSFlags
}

// bookieTLSFlags are the flags that make a command's client speak TLS to
// the bookies (client.Config.TLS), shared by every command that dials them.
type bookieTLSFlags struct {
	ca, cert, key, serverName string
}

func (f *bookieTLSFlags) add(fs *flag.FlagSet) {
	fs.StringVar(&f.ca, "bookie-tls-ca", "", "dial the bookies' TLS listeners, verifying them with the CAs in this PEM file")
	fs.StringVar(&f.cert, "bookie-tls-cert", "", "client certificate (PEM) for bookies that require one; implies TLS")
	fs.StringVar(&f.key, "bookie-tls-key", "", "key (PEM) of --bookie-tls-cert")
	fs.StringVar(&f.serverName, "bookie-tls-server-name", "", "name the bookies' certificates must carry (default: the host dialed); implies TLS")
}

// config returns the client TLS config the flags ask for, nil for none.
func (f *bookieTLSFlags) config() (*tls.Config, error) {
	if f.ca == "" && f.cert == "" && f.key == "" && f.serverName == "" {
		return nil, nil
	}
	cfg, err := client.TLSConfig(f.ca, f.cert, f.key, f.serverName)
	if err != nil {
		return nil, fmt.Errorf("--bookie-tls-*: %w", err)
	}
	return cfg, nil
}

// add registers --metadata, --config, --secret-file and the --bookie-tls-*
// flags on fs, for commands that dial bookies.
func (f *clusterFlags) add(fs *flag.FlagSet) {
	f.addMetadata(fs)
	f.bookieTLS.add(fs)
}

// addMetadata registers --metadata, --config and --secret-file only, for
// commands that read the metadata store but never dial a bookie's protocol
// port (those that talk to admin endpoints).
func (f *clusterFlags) addMetadata(fs *flag.FlagSet) {
	fs.StringVar(&f.metadata, "metadata", "", "metadata store, etcd[s]://host:port[,...][/prefix][?ca=...&user=...] (default: $BK_METADATA, the config file, else "+defaultMetadata+")")
	f.addSecret(fs)
}

// addSecret registers only --config and --secret-file, for commands that
// need the cluster secret but not the metadata store.
func (f *clusterFlags) addSecret(fs *flag.FlagSet) {
	fs.StringVar(&f.config, "config", "", "CLI config file, JSON with \"metadata\" and \"secret_file\" (default "+tildePath(defaultCLIConfigPath())+", if it exists)")
	fs.StringVar(&f.secretFile, "secret-file", "", "cluster secret file, for bookies that require authentication (default: $BK_CLUSTER_SECRET, the config file)")
}

// tildePath shortens a path under the home directory to ~/...
func tildePath(p string) string {
	if h, err := os.UserHomeDir(); err == nil && h != "" && strings.HasPrefix(p, h+string(filepath.Separator)) {
		return "~" + p[len(h):]
	}
	return p
}

// resolve returns the metadata endpoint and the cluster secret. Each is
// taken from the first of: the flag, the environment (BK_METADATA,
// BK_CLUSTER_SECRET), the config file; the endpoint defaults to
// defaultMetadata. A missing default config file is not an error; a
// missing --config file is.
func (f *clusterFlags) resolve() (endpoint string, secret []byte, err error) {
	var cfg cliConfig
	path, explicit := f.config, f.config != ""
	if !explicit {
		path = defaultCLIConfigPath()
	}
	if path != "" {
		data, err := os.ReadFile(path)
		switch {
		case err == nil:
			dec := json.NewDecoder(strings.NewReader(string(data)))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&cfg); err != nil {
				return "", nil, jsonFileError("config file", path, data, fmt.Errorf("config file %s: %w", path, err))
			}
		case explicit || !errors.Is(err, os.ErrNotExist):
			return "", nil, fmt.Errorf("config file: %w", err)
		}
	}
	endpoint = firstNonEmpty(f.metadata, os.Getenv("BK_METADATA"), cfg.Metadata, defaultMetadata)
	if _, err := meta.ParseEndpoints(endpoint); err != nil {
		return "", nil, err
	}
	if f.secretFile != "" {
		secret, err = loadSecret(f.secretFile)
	} else if os.Getenv("BK_CLUSTER_SECRET") != "" {
		secret, err = envSecret()
	} else if cfg.SecretFile != "" {
		secret, err = loadSecret(cfg.SecretFile)
	}
	return endpoint, secret, err
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// reachTimeout bounds checkReachable's TCP dial of each etcd address.
const reachTimeout = 2 * time.Second

// checkReachable first reads the TLS and password files endpoint names,
// so a bad path is reported as such whether or not etcd is up. Then it
// dials each etcd address over TCP (TLS and authentication are
// meta.Open's) and returns nil as soon as one accepts. Otherwise it names
// every address with its dial error ("connection refused"), which etcd's
// client hides behind a 10 s "context deadline exceeded".
//
// The first address that accepts is asked GET /version, which every etcd
// answers on its client port (over TLS for etcds://, authentication
// aside): an answer that is not etcd's, or none, is reported as such
// ("is not etcd") at once, where etcd's client would wait out its 10 s.
func checkReachable(ctx context.Context, endpoint string) error {
	ep, err := meta.ParseEndpoints(endpoint)
	if err != nil {
		return err
	}
	cc, err := ep.ClientConfig()
	if err != nil {
		return err
	}
	var errs []string
	for _, addr := range ep.Addrs {
		dctx, cancel := context.WithTimeout(ctx, reachTimeout)
		var d net.Dialer
		c, err := d.DialContext(dctx, "tcp", addr)
		cancel()
		if err == nil {
			c.Close()
			if err := probeEtcd(ctx, addr, cc.TLS); err != nil {
				return fmt.Errorf("metadata store %s: %s accepts connections but %w; point --metadata, BK_METADATA or the config file at etcd's client port (bk local prints it as metadata:)",
					endpoint, addr, err)
			}
			return nil
		}
		var op *net.OpError
		if errors.As(err, &op) && op.Err != nil {
			err = op.Err // "connection refused", not "dial tcp 127.0.0.1:2379: connect: ..."
		}
		errs = append(errs, fmt.Sprintf("%s: %v", addr, err))
	}
	return fmt.Errorf("cannot reach the metadata store %s (%s); start one (bk local serves %s) or point --metadata, BK_METADATA or the config file at it",
		endpoint, strings.Join(errs, "; "), defaultMetadata)
}

// probeTimeout bounds probeEtcd's GET /version; etcd answers it at once.
const probeTimeout = 3 * time.Second

// errNotEtcd is returned by probeEtcd for a server that is not etcd.
var errNotEtcd = errors.New("is not etcd")

// probeEtcd asks the server at addr for GET /version, over TLS with tlsCfg
// when it is not nil, and returns an error wrapping errNotEtcd unless the
// answer is etcd's ({"etcdserver": ...}). A failed TLS handshake is left to
// etcd's client, which reports certificate problems in its own words.
func probeEtcd(ctx context.Context, addr string, tlsCfg *tls.Config) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	scheme := "http"
	if tlsCfg != nil {
		scheme = "https"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+addr+"/version", nil)
	if err != nil {
		return err
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg, DisableKeepAlives: true, Proxy: nil}}
	resp, err := hc.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // without "Get URL: "
		}
		var header tls.RecordHeaderError
		switch {
		case ctx.Err() != nil:
			return fmt.Errorf("%w (no answer to GET /version within %v)", errNotEtcd, probeTimeout)
		case tlsCfg != nil && (errors.As(err, &header) || errors.Is(err, io.EOF) ||
			strings.Contains(err.Error(), "HTTP response to HTTPS client")):
			return fmt.Errorf("%w over TLS (%v; an etcd without TLS is etcd://, not etcds://)", errNotEtcd, err)
		case tlsCfg != nil:
			return nil // a certificate or a TLS alert: etcd's client says which
		case strings.Contains(err.Error(), "BKGO"):
			return fmt.Errorf("%w (it answers in the bookie protocol: a bookie's port?)", errNotEtcd)
		}
		return fmt.Errorf("%w (GET /version: %v)", errNotEtcd, err)
	}
	defer resp.Body.Close()
	var v struct {
		Server string `json:"etcdserver"`
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &v) != nil || v.Server == "" {
		return fmt.Errorf("%w (GET /version answered %s%s)", errNotEtcd, resp.Status, adminHint(resp))
	}
	return nil
}

// adminHint names a bookie's admin endpoint when resp looks like one.
func adminHint(resp *http.Response) string {
	if resp.StatusCode == http.StatusNotFound {
		return "; a bookie's admin port?"
	}
	return ""
}

// openStore resolves the cluster flags, checks that etcd answers TCP, and
// opens its metadata store within 10 s, for commands that need no bookie.
func (f *clusterFlags) openStore(ctx context.Context) (*meta.EtcdStore, error) {
	endpoint, _, err := f.resolve()
	if err != nil {
		return nil, err
	}
	if err := checkReachable(ctx, endpoint); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return meta.Open(ctx, endpoint)
}

// openClient resolves the cluster flags, checks that etcd answers TCP, and
// opens a client on it within 10 s.
func (f *clusterFlags) openClient(ctx context.Context) (*client.Client, error) {
	endpoint, secret, err := f.resolve()
	if err != nil {
		return nil, err
	}
	tlsCfg, err := f.bookieTLS.config()
	if err != nil {
		return nil, err
	}
	if err := checkReachable(ctx, endpoint); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return client.New(ctx, client.Config{Metadata: endpoint, Secret: secret, TLS: tlsCfg}) // errors name the endpoint
}
