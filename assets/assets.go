// Package assets holds the style sheet and script that render inlines into
// the page (no CDN, no web fonts: the page works offline and from file://).
package assets

import _ "embed"

// CSS is the page's style sheet.
//
//go:embed style.css
var CSS string

// JS is the page's script. Without it the page is complete; it adds the
// filters and re-checks the data's age while the page stays open.
//
//go:embed page.js
var JS string
