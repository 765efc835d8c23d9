# The serve check of bench/tp/RESULTS.md session 6 (B2): 16 greedy completions asked one at a time, then the same 16 at
# once, from a running `cmf serve` on 127.0.0.1:PORT; prints how many texts differ. Usage: python3 serve_invariance.py PORT
import json, sys, threading, urllib.request
port = int(sys.argv[1])
prompts = ["Once upon a time %d" % i if i % 2 else "The little %s" % w for i, w in enumerate(
    ["cat", "dog", "girl", "boy", "tree", "bird", "sun", "car", "ball", "fish", "mom", "dad", "cake", "toy", "park", "rain"])]
def ask(p):
    body = json.dumps({"prompt": p, "max_tokens": 150, "temperature": 0}).encode()
    r = urllib.request.urlopen(urllib.request.Request("http://127.0.0.1:%d/v1/completions" % port, body,
                               {"Content-Type": "application/json"}), timeout=60)
    return json.load(r)["choices"][0]["text"]
alone = [ask(p) for p in prompts]
load = [None] * len(prompts)
def run(i): load[i] = ask(prompts[i])
ts = [threading.Thread(target=run, args=(i,)) for i in range(len(prompts))]
[t.start() for t in ts]; [t.join() for t in ts]
diff = sum(a != b for a, b in zip(alone, load))
print("completions differing alone vs under load: %d of %d" % (diff, len(prompts)))
