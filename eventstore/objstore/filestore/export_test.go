package filestore

// UseTemporaryFiles makes b take Create's portable path (a temporary file
// linked to its name) as on a system without unnamed files.
func UseTemporaryFiles(b *Bucket) { b.noUnnamed.Store(true) }

// UnnamedCreates is the number of objects b created as unnamed files.
func UnnamedCreates(b *Bucket) int64 { return b.unnamed.Load() }

// SortedEntries is the number of folder entries b's listings kept and
// sorted.
func SortedEntries(b *Bucket) int64 { return b.sorted.Load() }

// TypedEntries is the number of folder entries whose type b's listings
// looked up (one lstat each).
func TypedEntries(b *Bucket) int64 { return b.typed.Load() }
