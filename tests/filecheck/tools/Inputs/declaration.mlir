func.func @main()
