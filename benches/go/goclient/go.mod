module drain-on-drop/goclient

go 1.27
