# A model program that calls the tool. Run: agentrt exec example.py --tool {{snake}}.wasm --fixture
print(hello("world"))
try:
    hello("")
except RuntimeError as error:
    print("caught:", error)
