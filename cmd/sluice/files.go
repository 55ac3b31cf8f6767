package main

import (
	"errors"
	"io/fs"
	"os"
)

// readNamedFile reads a file the user named on the command line (schema
// check FILE, --upcaster, --previous). One that is not there is a name
// that does not exist: exit code 3, like a missing group or letter (it
// was 1). Files the commands open for themselves keep their own codes: a
// segment missing under an indexed event is damage, not a wrong name.
func readNamedFile(name string) ([]byte, error) {
	b, err := os.ReadFile(name)
	return b, namedFileError(err)
}

// namedFileError is err of opening a file the user named, with exit code
// 3 when the file does not exist.
func namedFileError(err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return &exitError{code: exitNotFound, err: err}
	}
	return err
}
