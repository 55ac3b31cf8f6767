// Package objstoretest provides the acceptance suite every objstore backend
// must pass (docs/objstore.md#backends): conditional create under races, conditional put,
// byte-exact whole and ranged reads, listing order and pagination, deletes,
// key validation and error classification. Backends call Run from their
// tests with a constructor of fresh, empty buckets.
package objstoretest
