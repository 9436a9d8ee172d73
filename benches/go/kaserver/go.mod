module drain-on-drop/kaserver

go 1.27
