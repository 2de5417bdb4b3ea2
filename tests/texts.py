"""Small texts written for the tests: two clear topics and questions about them."""

# Ten short documents in two clear topics, written for these tests.
TOPICS = {
    "bees": [
        "Honey bees live in colonies with one queen, thousands of workers and some drones.",
        "Worker bees collect nectar from flowers and turn it into honey inside the hive.",
        "Bees communicate the direction of food with a waggle dance on the comb.",
        "Beekeepers use smoke to calm a colony before they open the hive.",
        "A queen bee can lay up to two thousand eggs on a single summer day.",
    ],
    "trains": [
        "Steam locomotives burn coal to boil water and drive pistons with the steam.",
        "High-speed trains in Japan, called Shinkansen, first ran in 1964.",
        "Railway signals tell drivers whether the block of track ahead is clear.",
        "Electric trains draw current from overhead wires through a pantograph.",
        "The gauge of a railway is the distance between the two rails.",
    ],
}

IN_KNOWLEDGE = [
    "How do bees tell each other where food is?",
    "What do worker bees make from nectar?",
    "Why do beekeepers use smoke?",
    "How many eggs can a queen bee lay in a day?",
    "Who lives in a honey bee colony?",
    "How does a steam locomotive work?",
    "When did the Shinkansen start running?",
    "What does a railway signal tell the driver?",
    "How do electric trains get their power?",
    "What is the gauge of a railway?",
    "What is a waggle dance?",
    "What is a pantograph used for on a train?",
]

OUT_OF_KNOWLEDGE = [
    "What is the capital of Australia?",
    "How do I bake sourdough bread at home?",
    "Who wrote the opera The Magic Flute?",
    "How many players are on a volleyball team?",
]

# More questions for two-sample (shift) tests, which need larger samples than one query.
MORE_IN_KNOWLEDGE = [
    "What do honey bees turn nectar into?",
    "Where in the hive is honey made?",
    "How do bees share the direction of flowers?",
    "What calms a bee colony before the hive is opened?",
    "How many eggs does a queen lay on a summer day?",
    "Which bees collect nectar?",
    "What are drones in a bee colony?",
    "What do steam engines burn to boil water?",
    "What drives the pistons of a steam locomotive?",
    "In which year did Japan's high-speed trains first run?",
    "What is the Japanese high-speed train called?",
    "Why do train drivers watch railway signals?",
    "Through what does an electric train take current from overhead wires?",
    "What is the distance between the two rails called?",
    "Where do electric trains get their current?",
    "What tells a driver whether the track ahead is clear?",
]

MORE_OUT_OF_KNOWLEDGE = [
    "What is the boiling point of olive oil?",
    "Who painted the ceiling of the Sistine Chapel?",
    "How long is a marathon in kilometres?",
    "What is the tallest mountain in Africa?",
    "How do I change a flat bicycle tyre?",
    "Which planet has the most moons?",
    "What language is spoken in Brazil?",
    "How many strings does a violin have?",
    "What is the chemical symbol for gold?",
    "Who discovered penicillin?",
    "How do you make a paper airplane fly farther?",
    "What year did the Berlin Wall fall?",
]
