package main

import "errors"

func queueMain(args []string) error {
	return errors.New("queue: not written yet")
}
