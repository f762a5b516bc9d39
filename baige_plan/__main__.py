from baige_plan.cli.app import main

if __name__ == "__main__":
    main()
