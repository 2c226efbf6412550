// Package templates holds render's html/template files, embedded in the
// binary so the page needs nothing at run time.
package templates

import "embed"

// FS holds every *.html template of this folder.
//
//go:embed *.html
var FS embed.FS
