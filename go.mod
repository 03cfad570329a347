module cachet.dev/cachet

go 1.26.0
