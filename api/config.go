package api

import (
	"github.com/sluicehq/sluice/shared/config"
)

// Settings is the SLUICE_API_* section (docs/api.md): the API process's
// settings, embedded in the handler's Config (the admin API reads its
// SLUICE_ADMIN_* tokens and services from the process configuration).
type Settings struct {
	Addr         string          `env:"SLUICE_API_ADDR" envDefault:":8080" doc:"Listen address of the command API."`
	Tokens       []config.Secret `env:"SLUICE_API_TOKENS" envSeparator:"," file:"true" doc:"Comma-separated bearer tokens; when set, every /v1 request needs one."`
	MaxBodyBytes int64           `env:"SLUICE_API_MAX_BODY_BYTES" envDefault:"1048576" doc:"Largest accepted request body."`
	// TLSCertFile and TLSKeyFile make the API listener speak TLS, for
	// deployments without an ingress (docs/security.md#tls-on-the-api).
	TLSCertFile string `env:"SLUICE_API_TLS_CERT_FILE" doc:"PEM certificate chain of the API listener; set with SLUICE_API_TLS_KEY_FILE, the API speaks only TLS (1.2 or later). Both files are read again when they change (checked at most every 10 s), so a renewed certificate needs no restart."`
	TLSKeyFile  string `env:"SLUICE_API_TLS_KEY_FILE" doc:"PEM private key of SLUICE_API_TLS_CERT_FILE."`
	MaxInFlight int    `env:"SLUICE_API_MAX_IN_FLIGHT" envDefault:"1024" doc:"Most /v1 requests served at once; one more is answered 429 too_many_requests with Retry-After at once, rather than queued until clients time out."`
	// AdminToken and AdminReadToken guard the admin API (/admin/v1/,
	// docs/console.md); without either, it answers 401 to every request.
	AdminToken     config.Secret `env:"SLUICE_ADMIN_TOKEN" file:"true" doc:"Bearer token of the admin API's operator role (reads and actions); unset: no operator, except in sluice dev, which makes one, prints it and keeps it in {data dir}/admin-token (mode 0600)."`
	AdminReadToken config.Secret `env:"SLUICE_ADMIN_READ_TOKEN" file:"true" doc:"Bearer token of the admin API's read-only role; unset: no reader. Without either token the admin API answers 401."`
	AdminServices  []string      `env:"SLUICE_ADMIN_SERVICES" envSeparator:"," doc:"Comma-separated name=URL of the health servers (SLUICE_HTTP_ADDR) of the services that run in other processes, e.g. relay=http://relay:9090; the console's health strip and flow charts read their /readyz and /metrics. Unset: only this api process (all of sluice dev)."`
}

// Validate checks the section; every problem is a *config.VarError.
func (c Settings) Validate() error {
	k := &config.Checker{}
	k.AtLeast("SLUICE_API_MAX_BODY_BYTES", c.MaxBodyBytes, 1024)
	k.AtLeast("SLUICE_API_MAX_IN_FLIGHT", int64(c.MaxInFlight), 1)
	if (c.TLSCertFile == "") != (c.TLSKeyFile == "") {
		k.Fail("SLUICE_API_TLS_CERT_FILE", c.TLSCertFile, "set it together with SLUICE_API_TLS_KEY_FILE")
	}
	return k.Err()
}
