package pipeline

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// tlsRecheck is how often the certificate files are looked at again.
const tlsRecheck = 10 * time.Second

// TLSConfig is the API listener's TLS configuration
// (docs/security.md#tls-on-the-api): the certificate and key of the files,
// read again when either file changes (its modification time or size,
// checked at most every 10 s on a handshake), so that a renewed
// certificate is served without a restart. A change that does not load
// (a half-written file, a key that does not match) is logged and the
// previous certificate kept.
func TLSConfig(certFile, keyFile string, log *slog.Logger) (*tls.Config, error) {
	if log == nil {
		log = slog.Default()
	}
	r := &certReloader{certFile: certFile, keyFile: keyFile, log: log, now: time.Now}
	if err := r.load(); err != nil {
		return nil, fmt.Errorf("api: TLS: %w (SLUICE_API_TLS_CERT_FILE, SLUICE_API_TLS_KEY_FILE)", err)
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: r.get, NextProtos: []string{"h2", "http/1.1"}}, nil
}

type certReloader struct {
	certFile, keyFile string
	log               *slog.Logger
	now               func() time.Time

	mu      sync.Mutex
	cert    *tls.Certificate
	stamp   string
	checked time.Time
}

// stampOf identifies the files' current content cheaply.
func (r *certReloader) stampOf() (string, error) {
	s := ""
	for _, f := range []string{r.certFile, r.keyFile} {
		fi, err := os.Stat(f)
		if err != nil {
			return "", err
		}
		s += fmt.Sprintf("%d/%d;", fi.ModTime().UnixNano(), fi.Size())
	}
	return s, nil
}

func (r *certReloader) load() error {
	stamp, err := r.stampOf()
	if err != nil {
		return err
	}
	c, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.cert, r.stamp, r.checked = &c, stamp, r.now()
	r.mu.Unlock()
	return nil
}

func (r *certReloader) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	due := r.now().Sub(r.checked) >= tlsRecheck
	if due {
		r.checked = r.now()
	}
	cert, stamp := r.cert, r.stamp
	r.mu.Unlock()
	if due {
		if now, err := r.stampOf(); err == nil && now != stamp {
			if err := r.load(); err != nil {
				r.log.Warn("api: TLS: the changed certificate does not load; the previous one stays in use", "err", err)
			} else {
				r.log.Info("api: TLS: certificate reloaded", "file", r.certFile)
				r.mu.Lock()
				cert = r.cert
				r.mu.Unlock()
			}
		}
	}
	return cert, nil
}
