// Package console provides sluice's operator web console (issue 24, item
// 4): a single page served at /console/ by the api process, its static
// files embedded with go:embed. It is plain HTML, CSS and ES modules — no
// build step, no npm, nothing fetched from elsewhere at run time.
//
// The page holds no data of its own: it calls the admin API (/admin/v1/,
// with the bearer token the operator enters, kept in sessionStorage) for the
// overview with its lag charts, the trace of a command, the aggregate
// view and the dead-letter actions, each action first as a dry run whose
// preview the operator confirms. The guarantee it keeps: the console can do
// nothing the token's role may not do through the API itself.
// docs/console.md is the operator guide.
package console
