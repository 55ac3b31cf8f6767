package admin

import "net/http"

// HandleRead serves h at pattern (http.ServeMux syntax, under Prefix) for
// both roles, behind the admin API's own token check: read-only views of
// other packages (the inspect trace and aggregate views) mount here, so
// one authority guards all of /admin/v1/. Call it before serving.
func (s *Server) HandleRead(pattern string, h http.Handler) {
	s.mux.Handle(pattern, h)
}
