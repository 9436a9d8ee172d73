module drain-on-drop/goserver

go 1.27
