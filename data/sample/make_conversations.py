#!/usr/bin/env python3
"""Writes data/sample/conversations.jsonl: ~400 synthetic but realistic-looking chat
conversations in the common {"messages": [{"role": ..., "content": ...}]} format.

The mix: system messages in about 40% of the conversations (every tool conversation, and
about a third of the others: 168 of 400 with the default seed), tool calls and tool results
in about a tenth (46 of 400), one to five user/assistant exchanges, lines from about 100
bytes to a few thousand. Deterministic: the same seed writes the same file.

Usage: make_conversations.py [--count 400] [--seed 2024] [--output conversations.jsonl]
Standard library only.
"""
import argparse
import json
import os
import random

SYSTEM_PROMPTS = [
    "You are a helpful assistant.",
    "You are a concise assistant. Answer in as few words as possible.",
    "You are a friendly cooking assistant. Give quantities in metric units.",
    "You are a senior software engineer who reviews code carefully and explains trade-offs.",
    "You are a patient maths tutor. Explain each step; do not just give the answer.",
    "You are a travel planner. Suggest realistic itineraries and mention costs when you can.",
    "You are a customer support agent for Northwind Internet. Be polite and specific.",
    "You are an assistant with access to tools. Call a tool when you need live data.",
    "You answer in British English and keep a calm, neutral tone.",
    "You are a writing coach. Suggest edits and explain why they help.",
]

CITIES = ["Lisbon", "Kyoto", "Montreal", "Edinburgh", "Valparaíso", "Tallinn", "Oaxaca", "Hobart",
          "Ljubljana", "Marrakesh", "Bergen", "Hanoi", "Cork", "Porto", "Zürich", "Seville"]
DISHES = {
    "lentil soup": ("red lentils", "onion", "carrot", "cumin", "vegetable stock", "lemon"),
    "banana bread": ("ripe bananas", "flour", "butter", "brown sugar", "eggs", "baking soda"),
    "risotto": ("arborio rice", "shallot", "white wine", "parmesan", "butter", "stock"),
    "shakshuka": ("eggs", "tomatoes", "red pepper", "onion", "paprika", "cumin"),
    "pancakes": ("flour", "milk", "eggs", "butter", "salt", "sugar"),
    "chickpea curry": ("chickpeas", "coconut milk", "onion", "garlic", "ginger", "garam masala"),
    "focaccia": ("bread flour", "yeast", "olive oil", "salt", "rosemary", "water"),
    "miso soup": ("dashi", "miso paste", "tofu", "wakame", "spring onion", "soy sauce"),
}
LANGUAGES = ["Python", "C++", "Rust", "Go", "JavaScript", "SQL"]
TOPICS = ["photosynthesis", "the water cycle", "plate tectonics", "compound interest", "inflation",
          "how vaccines work", "the French Revolution", "black holes", "the printing press",
          "supply and demand", "the immune system", "tides", "how batteries work", "DNA replication"]
NAMES = ["Amira", "Bjorn", "Chen", "Dolores", "Emeka", "Fatima", "Giulia", "Hiro", "Ines", "Jonas",
         "Kalani", "Lena", "Mateo", "Nadia", "Oskar", "Priya", "Quentin", "Rosa", "Sami", "Tove"]


def pick(rng, seq):
    return seq[rng.randrange(len(seq))]


def paragraph(rng, sentences):
    return " ".join(rng.sample(sentences, k=min(len(sentences), rng.randint(2, len(sentences)))))


# --- scenario generators: each returns a list of (role, content) without the system turn ---

def cooking(rng):
    dish, ingredients = pick(rng, list(DISHES.items()))
    serves = rng.choice([2, 4, 6])
    turns = [("user", f"Can you give me a simple recipe for {dish} for {serves} people?")]
    steps = [f"{i + 1}. " + s for i, s in enumerate([
        f"Prepare the {ingredients[1]} and {ingredients[2]}; measure everything before you start.",
        f"Combine the {ingredients[0]} with the {ingredients[3]} and cook gently for "
        f"{rng.randint(5, 20)} minutes, stirring now and then.",
        f"Add the {ingredients[4]} and season to taste.",
        f"Finish with the {ingredients[5]} and let it rest for {rng.randint(2, 10)} minutes before serving.",
    ])]
    amounts = [f"- {rng.randint(1, 5) * 50} g {ing}" if i % 2 == 0 else f"- {rng.randint(1, 4)} {ing}"
               for i, ing in enumerate(ingredients)]
    turns.append(("assistant", f"Here is an easy {dish} for {serves}:\n\nIngredients:\n" + "\n".join(amounts) +
                  "\n\nMethod:\n" + "\n".join(steps) + "\n\nEnjoy!"))
    if rng.random() < 0.6:
        missing = pick(rng, ingredients)
        turns.append(("user", f"I don't have {missing}. What can I use instead?"))
        turns.append(("assistant", rng.choice([
            f"You can leave the {missing} out; the result will be a little plainer but still good.",
            f"A good substitute for {missing} is whatever you have that plays the same role: for flavour, "
            f"a pinch of spice or a squeeze of citrus; for texture, a similar amount of another staple.",
            f"Try doubling one of the other ingredients instead of {missing}, and taste as you go.",
        ])))
    if rng.random() < 0.3:
        turns.append(("user", "How long will leftovers keep?"))
        turns.append(("assistant", f"In a sealed container in the fridge, about {rng.randint(2, 4)} days. "
                                   "Reheat until piping hot, and only reheat it once."))
    return turns


def coding(rng):
    lang = pick(rng, LANGUAGES)
    task = rng.choice([
        ("reverse a string", {
            "Python": "def reverse(s: str) -> str:\n    return s[::-1]",
            "C++": "#include <algorithm>\n#include <string>\n\nstd::string reverse(std::string s) {\n"
                   "  std::reverse(s.begin(), s.end());\n  return s;\n}",
            "Rust": "fn reverse(s: &str) -> String {\n    s.chars().rev().collect()\n}",
            "Go": "func reverse(s string) string {\n\tr := []rune(s)\n\tfor i, j := 0, len(r)-1; i < j; "
                  "i, j = i+1, j-1 {\n\t\tr[i], r[j] = r[j], r[i]\n\t}\n\treturn string(r)\n}",
            "JavaScript": "const reverse = (s) => [...s].reverse().join('');",
            "SQL": "SELECT REVERSE(name) FROM users;",
        }),
        ("count word frequencies", {
            "Python": "from collections import Counter\n\ndef word_counts(text: str) -> Counter:\n"
                      "    return Counter(text.lower().split())",
            "C++": "std::unordered_map<std::string, int> word_counts(std::istream& in) {\n"
                   "  std::unordered_map<std::string, int> counts;\n  std::string w;\n"
                   "  while (in >> w) ++counts[w];\n  return counts;\n}",
            "Rust": "use std::collections::HashMap;\n\nfn word_counts(text: &str) -> HashMap<&str, usize> {\n"
                    "    let mut m = HashMap::new();\n    for w in text.split_whitespace() {\n"
                    "        *m.entry(w).or_insert(0) += 1;\n    }\n    m\n}",
            "Go": "func wordCounts(text string) map[string]int {\n\tm := map[string]int{}\n"
                  "\tfor _, w := range strings.Fields(text) {\n\t\tm[w]++\n\t}\n\treturn m\n}",
            "JavaScript": "function wordCounts(text) {\n  const m = new Map();\n"
                          "  for (const w of text.split(/\\s+/).filter(Boolean)) m.set(w, (m.get(w) || 0) + 1);\n"
                          "  return m;\n}",
            "SQL": "SELECT word, COUNT(*) AS n FROM words GROUP BY word ORDER BY n DESC;",
        }),
        ("read a file line by line", {
            "Python": "with open(path, encoding='utf-8') as f:\n    for line in f:\n        handle(line.rstrip('\\n'))",
            "C++": "std::ifstream in(path);\nfor (std::string line; std::getline(in, line);) {\n  handle(line);\n}",
            "Rust": "use std::io::{BufRead, BufReader};\n\nlet file = std::fs::File::open(path)?;\n"
                    "for line in BufReader::new(file).lines() {\n    handle(&line?);\n}",
            "Go": "f, err := os.Open(path)\nif err != nil {\n\treturn err\n}\ndefer f.Close()\n"
                  "s := bufio.NewScanner(f)\nfor s.Scan() {\n\thandle(s.Text())\n}\nreturn s.Err()",
            "JavaScript": "const rl = readline.createInterface({ input: fs.createReadStream(path) });\n"
                          "for await (const line of rl) handle(line);",
            "SQL": "-- SQL does not read files line by line; load the file with COPY first:\n"
                   "COPY lines(text) FROM '/path/to/file.txt';",
        }),
    ])
    name, snippets = task
    turns = [("user", rng.choice([f"How do I {name} in {lang}?", f"What's the idiomatic way to {name} in {lang}?",
                                  f"Quick {lang} question: {name}?"]))]
    turns.append(("assistant", f"In {lang}:\n\n```\n{snippets[lang]}\n```\n\n" + rng.choice([
        "This is short and handles the common cases.",
        "This runs in linear time in the size of the input.",
        "Watch out for very large inputs; stream them rather than loading everything into memory.",
    ])))
    if rng.random() < 0.5:
        turns.append(("user", rng.choice(["Can you explain how that works?", "Is there a faster way?",
                                          "What about Unicode input?", "Could you add error handling?"])))
        turns.append(("assistant", paragraph(rng, [
            "The standard library does most of the work here, which keeps the code short and well tested.",
            "For Unicode, operate on characters or grapheme clusters rather than bytes.",
            "Errors should be reported with enough context to act on: which file, which line, what was expected.",
            "A faster version is rarely needed; measure first, then optimise the part that dominates.",
            "If the input can be huge, process it in chunks so that memory use stays bounded.",
        ])))
    return turns


def review(rng):
    bug = rng.choice([
        ("for (int i = 0; i <= v.size(); ++i) sum += v[i];", "The loop reads one element past the end: "
         "use `i < v.size()`, and prefer a range-based for loop (`for (int x : v) sum += x;`)."),
        ("if (ptr = nullptr) return;", "That is an assignment, not a comparison: it sets `ptr` to null and "
         "never returns. Write `if (ptr == nullptr)`; compiling with -Wall would have warned you."),
        ("def add(item, items=[]):\n    items.append(item)\n    return items",
         "The default list is created once and shared between calls, so items accumulate. Use "
         "`items=None` and create a new list inside the function."),
        ("SELECT * FROM orders WHERE customer = '" + "' + name + '" + "';",
         "Building SQL by string concatenation allows SQL injection. Use a parameterised query instead."),
    ])
    turns = [("user", f"Can you review this snippet?\n\n```\n{bug[0]}\n```")]
    turns.append(("assistant", bug[1]))
    if rng.random() < 0.4:
        turns.append(("user", "Thanks. Anything else you'd change?"))
        turns.append(("assistant", "Add a unit test that covers the edge case, so the bug cannot come back "
                                   "unnoticed. Beyond that it looks fine."))
    return turns


def maths(rng):
    kind = rng.randrange(4)
    if kind == 0:
        a, b = rng.randint(12, 99), rng.randint(12, 99)
        q = f"What is {a} × {b}?"
        ans = (f"{a} × {b} = {a * b}.\n\nOne way to see it: {a} × {b} = {a} × {b // 10 * 10} + {a} × {b % 10} "
               f"= {a * (b // 10 * 10)} + {a * (b % 10)} = {a * b}.")
    elif kind == 1:
        p, r, y = rng.choice([1000, 2500, 5000]), rng.choice([2, 3, 4, 5]), rng.choice([3, 5, 10])
        total = p * (1 + r / 100) ** y
        q = f"If I invest {p} euros at {r}% interest compounded yearly, how much do I have after {y} years?"
        ans = (f"Use A = P(1 + r)^n with P = {p}, r = {r / 100}, n = {y}:\n\nA = {p} × {1 + r / 100}^{y} "
               f"≈ {total:.2f} euros.\n\nSo you earn about {total - p:.2f} euros in interest.")
    elif kind == 2:
        a, b = rng.randint(2, 9), rng.randint(1, 30)
        c = a * rng.randint(1, 12) + b
        q = f"Solve {a}x + {b} = {c}."
        ans = f"Subtract {b} from both sides: {a}x = {c - b}. Divide by {a}: x = {(c - b) // a}."
    else:
        w, h = rng.randint(2, 20), rng.randint(2, 20)
        q = f"A rectangle is {w} m by {h} m. What are its area and perimeter?"
        ans = f"Area = {w} × {h} = {w * h} m². Perimeter = 2 × ({w} + {h}) = {2 * (w + h)} m."
    turns = [("user", q), ("assistant", ans)]
    if rng.random() < 0.35:
        turns.append(("user", "Can you check that another way?"))
        turns.append(("assistant", "Substitute the result back into the original statement: both sides "
                                   "agree, so the answer is consistent."))
    return turns


def explain(rng):
    topic = pick(rng, TOPICS)
    level = rng.choice(["a ten-year-old", "a first-year student", "someone with no science background", "an expert"])
    sentences = [
        f"At its core, the idea behind {topic} is how one state of a system turns into another.",
        "It helps to start with a concrete example before the general rule.",
        "Scientists describe it with a small number of quantities that can be measured.",
        "A common misconception is that it happens all at once; in reality it is gradual.",
        "Historically, the idea was controversial before the evidence became overwhelming.",
        "You can see the effect in everyday life if you know where to look.",
        "The details vary, but the overall pattern is remarkably consistent.",
        "Models of it are simplifications: useful, but not the whole story.",
    ]
    turns = [("user", f"Explain {topic} as if I were {level}.")]
    n = rng.randint(1, 4)
    turns.append(("assistant", "\n\n".join(paragraph(rng, sentences) for _ in range(n))))
    for _ in range(rng.randint(0, 4)):
        follow = rng.choice(["Why does that happen?", "Can you give an example?", "Is that always true?",
                             "How do we know?", "What would happen otherwise?", "Summarise that in one sentence."])
        turns.append(("user", follow))
        turns.append(("assistant", paragraph(rng, sentences)))
    return turns


def travel(rng):
    city = pick(rng, CITIES)
    days = rng.randint(2, 5)
    turns = [("user", f"I have {days} days in {city}. What should I do?")]
    plan = []
    for d in range(1, days + 1):
        plan.append(f"Day {d}: " + rng.choice([
            "walk the old town in the morning, museum in the afternoon, dinner somewhere local.",
            "a day trip by train to the coast; pack a rain jacket.",
            "markets in the morning, a cooking class, then a viewpoint at sunset.",
            "a slow day: a long lunch, a park, and an early night.",
            "guided walking tour, then the main gallery (book tickets ahead).",
        ]))
    turns.append(("assistant", f"A relaxed {days}-day plan for {city}:\n\n" + "\n".join(plan) +
                  f"\n\nBudget roughly {rng.randint(60, 180)} euros a day for food, transport and entry fees."))
    if rng.random() < 0.5:
        turns.append(("user", "What's the best way to get around?"))
        turns.append(("assistant", rng.choice([
            "Walk where you can; the centre is compact. For longer trips, a day pass on public transport is cheapest.",
            "Public transport is reliable. Buy a rechargeable card at the airport or main station.",
            "Rent a bike for the flat parts of the city and use trams for the hills.",
        ])))
    return turns


def support(rng):
    name = pick(rng, NAMES)
    order = rng.randint(100000, 999999)
    issue = rng.choice(["my internet keeps dropping every evening", "I was charged twice this month",
                        "my router's light is blinking orange", "I want to upgrade my plan",
                        "the speed is much lower than what I pay for"])
    turns = [("user", f"Hi, I'm {name}, account {order}. {issue[0].upper() + issue[1:]}.")]
    turns.append(("assistant", f"Thanks, {name}. I'm sorry about that. " + rng.choice([
        "Could you restart the router (unplug it for 30 seconds) and tell me whether the problem continues?",
        "I can see the duplicate charge on account {0}; I've requested a refund, which takes 3-5 working days.".format(order),
        "An orange light usually means the line is not synchronised. Please check the cable to the wall socket.",
        "Our Fibre 500 plan costs 10 euros more per month. Shall I schedule the upgrade for the next billing cycle?",
        "Please run a speed test with a cable connected to the router and send me the result.",
    ])))
    if rng.random() < 0.6:
        turns.append(("user", rng.choice(["Done, it's still the same.", "Yes please.", "OK, I'll try that now.",
                                          "How long will that take?"])))
        turns.append(("assistant", rng.choice([
            "Thanks for checking. I've opened a ticket for a technician; you'll get a text with an appointment.",
            "All set. You'll receive a confirmation email shortly. Is there anything else I can help with?",
            "Usually within one working day. I'll follow up by email if anything changes.",
        ])))
    return turns


def writing(rng):
    sentence, answer = rng.choice([
        ("Due to the fact that the meeting was delayed, we was unable to finalise the budget.",
         "A tighter version:\n\n\"Because the meeting was delayed, we could not finalise the budget.\"\n\n"
         "\"Because\" replaces the wordy \"due to the fact that\", and \"could not\" fixes the verb agreement."),
        ("The results, which were very interesting and also quite surprising, shows a clear trend.",
         "Try:\n\n\"The surprising results show a clear trend.\"\n\nThe subject is \"results\", so the verb is "
         "\"show\"; and \"very interesting and also quite surprising\" says less than one precise adjective."),
        ("In my opinion I think that the new policy it is not fair for everyone.",
         "Suggested edit:\n\n\"I think the new policy is unfair to some people.\"\n\n\"In my opinion\" and "
         "\"I think\" say the same thing, and the extra \"it\" is ungrammatical."),
        ("Their going to announce the winners tomorrow, irregardless of the weather.",
         "Corrected:\n\n\"They're going to announce the winners tomorrow, regardless of the weather.\"\n\n"
         "\"They're\" is \"they are\", and \"irregardless\" is best avoided in formal writing."),
    ])
    turns = [("user", f"Can you improve this sentence?\n\n\"{sentence}\"")]
    turns.append(("assistant", answer))
    if rng.random() < 0.3:
        turns.append(("user", "Why does that matter in a report?"))
        turns.append(("assistant", "Readers skim reports. Short, correct sentences let them find the point "
                                   "quickly and trust the rest of the document."))
    return turns


def short_qa(rng):
    q, a = rng.choice([
        ("What's the capital of Australia?", "Canberra."),
        ("How many bones are in the adult human body?", "206."),
        ("Who wrote Pride and Prejudice?", "Jane Austen, published in 1813."),
        ("What's the boiling point of water at sea level in Fahrenheit?", "212 °F."),
        ("Translate 'thank you' into Japanese.", "ありがとう (arigatō)."),
        ("Is a tomato a fruit?", "Botanically yes; in cooking it is usually treated as a vegetable."),
        ("What does HTTP stand for?", "HyperText Transfer Protocol."),
        ("hi", "Hello! How can I help you today?"),
        ("What's 15% of 80?", "12."),
        ("Name three primary colours.", "Red, yellow and blue (in painting); red, green and blue for light."),
    ])
    return [("user", q), ("assistant", a)]


# --- tool-calling conversations: the assistant emits a call as text; the tool turn holds the result ---

def tool_weather(rng):
    city = pick(rng, CITIES)
    temp, sky = rng.randint(-5, 32), rng.choice(["sunny", "cloudy", "light rain", "snow", "windy"])
    return [
        ("user", f"What's the weather like in {city} right now?"),
        ("assistant", json.dumps({"tool_call": {"name": "get_weather", "arguments": {"city": city}}},
                                 ensure_ascii=False)),
        ("tool", json.dumps({"city": city, "temperature_c": temp, "conditions": sky,
                             "humidity": rng.randint(30, 95)}, ensure_ascii=False)),
        ("assistant", f"It's currently {temp} °C and {sky} in {city}." +
         (" Take an umbrella." if "rain" in sky else "")),
    ]


def tool_calculator(rng):
    a, b = rng.randint(1000, 99999), rng.randint(2, 999)
    op, sym = rng.choice([("multiply", "×"), ("divide", "÷"), ("add", "+")])
    result = a * b if op == "multiply" else (round(a / b, 4) if op == "divide" else a + b)
    turns = [
        ("user", f"What is {a} {sym} {b}?"),
        ("assistant", json.dumps({"tool_call": {"name": "calculator",
                                                "arguments": {"operation": op, "a": a, "b": b}}})),
        ("tool", json.dumps({"result": result})),
        ("assistant", f"{a} {sym} {b} = {result}."),
    ]
    if rng.random() < 0.4:
        turns.append(("user", "And half of that?"))
        turns.append(("assistant", f"Half of {result} is {result / 2:g}."))
    return turns


def tool_search(rng):
    topic = pick(rng, TOPICS)
    return [
        ("user", f"Find me a recent article about {topic}."),
        ("assistant", json.dumps({"tool_call": {"name": "search", "arguments": {"query": topic, "limit": 3}}})),
        ("tool", json.dumps({"results": [
            {"title": f"A new look at {topic}", "source": "Science Weekly", "year": rng.choice([2022, 2023, 2024])},
            {"title": f"{topic.capitalize()}: what we still don't know", "source": "The Review", "year": 2023},
        ]})),
        ("assistant", f"I found two: \"A new look at {topic}\" in Science Weekly, and \"{topic.capitalize()}: what "
                      "we still don't know\" in The Review. The first is a good overview; the second goes deeper."),
    ]


def long_story(rng):
    name = pick(rng, NAMES)
    city = pick(rng, CITIES)
    beats = [
        f"{name} arrived in {city} on a grey morning with one suitcase and an address written on a napkin.",
        "The address turned out to be a bakery that had closed years ago.",
        "An old man sweeping the pavement said the owner still came by on Thursdays to feed the cats.",
        f"So {name} waited, drinking too much coffee in the café across the street, sketching the shopfront.",
        "On Thursday the owner came, recognised the handwriting on the napkin, and laughed until she cried.",
        "It was her brother's, she said; he had promised a job to anyone who found the place.",
        f"By the end of the month the ovens were warm again, and {name} was learning to shape bread by feel.",
        "Nobody ever found out where the brother had gone, but every year a postcard arrived, unsigned.",
    ]
    turns = [("user", f"Write a short story about someone named {name} who moves to {city}.")]
    turns.append(("assistant", "\n\n".join(" ".join(beats[i:i + 2]) for i in range(0, len(beats), 2))))
    if rng.random() < 0.5:
        turns.append(("user", "Can you give it a title and make the ending more hopeful?"))
        turns.append(("assistant", f"Title: \"The Napkin Address\"\n\n" + " ".join(beats[4:7]) +
                      " On the first anniversary, the postcard was signed at last: \"See you on Thursday.\""))
    return turns


NOTES = [
    "The quarterly review opened with sales: revenue grew 8% on the previous quarter, driven mostly by the "
    "new subscription tier, while one-off hardware sales fell for the third quarter running.",
    "Operations reported that the warehouse move finished two weeks late. Shipping times recovered in the "
    "last month but returns processing is still slower than before the move.",
    "The support team handled 14,200 tickets, up 12%. Median first response time was 3 hours 10 minutes, "
    "against a target of 2 hours; weekend cover is the main gap.",
    "Engineering shipped the billing migration and the new onboarding flow. The mobile app release slipped "
    "to next quarter because of a dependency on the payments provider's new API.",
    "Finance flagged that cloud costs rose faster than usage. A review of idle resources is planned, with a "
    "target saving of 15% by the end of the next quarter.",
    "Hiring: four of six open roles were filled. The two data engineering roles remain open and will be "
    "re-advertised with a remote option.",
    "Customer research found that small teams value the shared calendar most, while larger customers ask "
    "for audit logs and single sign-on before anything else.",
    "Risks discussed: dependence on one payments provider, the slow returns process, and the support "
    "backlog at weekends. Owners were assigned to each with a review date in six weeks.",
    "Action items: finance to circulate the cost review plan; support to propose a weekend rota; product to "
    "scope audit logs; engineering to confirm the new mobile release date by Friday.",
]


def summarise(rng):
    k = rng.randint(4, len(NOTES))
    notes = "\n\n".join(NOTES[:1] + rng.sample(NOTES[1:], k - 1))
    turns = [("user", rng.choice(["Summarise these meeting notes in five bullet points:",
                                  "Can you give me the key points from these notes?",
                                  "TL;DR please:"]) + "\n\n" + notes)]
    turns.append(("assistant", "- Revenue up 8% on the new subscription tier; hardware sales still falling.\n"
                               "- Support volume up 12% and response times above target, mainly at weekends.\n"
                               "- Billing migration and onboarding shipped; mobile release slipped a quarter.\n"
                               "- Cloud costs are growing faster than usage; a 15% saving is targeted.\n"
                               "- Owners and review dates are set for the main risks and action items."))
    if rng.random() < 0.4:
        turns.append(("user", "Which of those needs attention first?"))
        turns.append(("assistant", "The weekend support gap: it affects customers directly every week, and a "
                                   "rota is cheap to try. The cost review matters too, but it is already planned."))
    return turns


SCENARIOS = [
    (cooking, 10), (coding, 14), (review, 6), (maths, 10), (explain, 12), (travel, 8), (support, 8),
    (writing, 6), (short_qa, 10), (tool_weather, 4), (tool_calculator, 4), (tool_search, 3), (long_story, 5), (summarise, 4),
]
SYSTEM_FOR = {cooking: 2, coding: 3, review: 3, maths: 4, travel: 5, support: 6, writing: 9,
              tool_weather: 7, tool_calculator: 7, tool_search: 7}


def conversation(rng):
    generators, weights = zip(*SCENARIOS)
    gen = rng.choices(generators, weights=weights, k=1)[0]
    turns = gen(rng)
    messages = []
    # Tool conversations always carry the tool-use system prompt; others about a third of the time.
    if gen in (tool_weather, tool_calculator, tool_search) or rng.random() < 0.33:
        idx = SYSTEM_FOR.get(gen)
        prompt = SYSTEM_PROMPTS[idx] if idx is not None and rng.random() < 0.8 else pick(rng, SYSTEM_PROMPTS)
        messages.append({"role": "system", "content": prompt})
    messages.extend({"role": r, "content": c} for r, c in turns)
    return {"messages": messages}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=400)
    parser.add_argument("--seed", type=int, default=2024)
    parser.add_argument("--output", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                         "conversations.jsonl"))
    args = parser.parse_args()
    rng = random.Random(args.seed)
    with open(args.output, "w", encoding="utf-8", newline="\n") as f:
        for _ in range(args.count):
            f.write(json.dumps(conversation(rng), ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
