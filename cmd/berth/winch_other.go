//go:build !unix

package main

import "os"

// notifyResize does nothing here: the console sends no resize signal, so
// the terminal keeps the size it had when it opened.
func notifyResize(chan<- os.Signal) {}
