"""A wide residual CNN: an example of a model brought to the pipeline by its users."""

import tf_keras as keras


def build(image_size, num_classes, width=32, blocks=3):
    """The trainer calls this inside the distribution strategy's scope.

    Args:
        image_size: Input width and height (the prepared dataset's).
        num_classes: Classes of the dataset.
        width: Filters of the first stage (doubled at each stage).
        blocks: Stages, each halving the resolution.

    Returns:
        An uncompiled tf.keras model from uint8-range pixels to class probabilities.
    """
    inputs = keras.Input((image_size, image_size, 3))
    x = keras.layers.Rescaling(1 / 127.5, offset=-1)(inputs)  # [0, 255] -> [-1, 1]
    for stage in range(blocks):
        filters = width * 2 ** stage
        shortcut = keras.layers.Conv2D(filters, 1, strides=2)(x)
        x = keras.layers.Conv2D(filters, 3, strides=2, padding="same", activation="relu")(x)
        x = keras.layers.Conv2D(filters, 3, padding="same")(x)
        x = keras.layers.Activation("relu")(keras.layers.Add()([x, shortcut]))
    x = keras.layers.GlobalAveragePooling2D()(x)
    outputs = keras.layers.Dense(num_classes, activation="softmax")(x)
    return keras.Model(inputs, outputs, name="wide_cnn")
