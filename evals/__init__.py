"""What the shipped commands measure (`finserve eval`, `finserve bench quality`, `finserve sweep`), with the labelled
data they read (evals/data/), and the helpers the developer benchmarks in bench/ share with them."""
