"""What the program readers and the backends share about the IRs they read (torch.fx
nodes, lowered modules, .pte tables), with no backend knowledge and no domain graph."""
