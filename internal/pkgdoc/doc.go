// Package pkgdoc holds the test that every package in the module has a
// package doc comment.
package pkgdoc
